"""Core API storage ids name checkpoints and nothing else (issue 28, item 1).

``core.checkpoint.delete("..")`` removed all of ``$DET_LITE_HOME``; ``"."`` and ``""`` every
checkpoint of the root; ``restore_path``/``download`` handed out the home, the root, or a
directory a symbolic link planted in the root pointed to; a script could delete another
experiment's checkpoint and its store row. Every call that takes a storage id is tried here
with a table of hostile ids, in local mode (in this process) and in a trial det-lite runs.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

from determined_lite import core
from determined_lite.runtime._cluster import SPEC_ENV
from determined_lite.storage import UnsafeNameError
from tests.cli_helpers import REPO, cli, describe, write_config

SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
OTHER = "0b9ec4a6-3a5e-4b8e-9a6c-3f1d2b7c8e90"  # another experiment's checkpoint
LINKED = "5d1c7e2a-8f4b-4c3d-9e6f-1a2b3c4d5e6f"  # a symbolic link planted in the root
ABSENT = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"


def hostile_ids(tmp_path: Path, own: str) -> List[str]:
    outside = str(tmp_path / "outside")
    return [
        "..",
        ".",
        "",
        "/",
        outside,  # absolute
        "a/../..",
        "../..",
        f"{own}/..",
        f"./{own}",
        f".tmp-{own}",
        f"-{own}",
        f" {own}",
        f"{own}\n",
        LINKED,
    ]


def files_under(top: Path) -> Dict[str, str]:
    """Every path under ``top`` (links not followed) and what it holds."""
    found = {}
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(parent, name)
            rel = os.path.relpath(path, top)
            if os.path.islink(path):
                found[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                found[rel] = Path(path).read_text()
            else:
                found[rel] = "/"
    return found


def plant(tmp_path: Path, home: Path) -> Path:
    """A home with a store file, another experiment's checkpoint, and a link out of the root."""
    root = home / "checkpoints"
    (home / "experiments" / "1" / "context").mkdir(parents=True)
    (home / "experiments" / "1" / "context" / "model_def.py").write_text("# trial\n")
    (home / "det-lite.db").write_text("the store")
    other = root / OTHER
    other.mkdir(parents=True)
    meta = {"uuid": OTHER, "steps_completed": 4, "experiment_id": 1, "store": str(home / "det-lite.db")}
    (other / "metadata.json").write_text(json.dumps(meta))
    (other / "state.json").write_text('{"w": 1}')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "metadata.json").write_text('{"steps_completed": 1}')
    (outside / "secret.txt").write_text("not a checkpoint")
    os.symlink(outside, root / LINKED)
    return root


def calls(ctx: Any, dest: Path) -> List[Tuple[str, Callable[[str], Any]]]:
    def restore(sid: str) -> None:
        with ctx.checkpoint.restore_path(sid):
            pass

    return [
        ("restore_path", restore),
        ("download", lambda sid: ctx.checkpoint.download(sid, str(dest))),
        ("get_metadata", ctx.checkpoint.get_metadata),
        ("delete", ctx.checkpoint.delete),
    ]


def test_every_call_refuses_ids_that_are_not_checkpoints(tmp_path: Path, monkeypatch, _det_lite_home) -> None:
    monkeypatch.delenv(SPEC_ENV, raising=False)
    root = plant(tmp_path, _det_lite_home)
    dest = tmp_path / "download"
    with core.init(checkpoint_storage=str(root)) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, own):
            (path / "w.txt").write_text("3")
            os.symlink(tmp_path / "outside" / "secret.txt", path / "leak")  # planted inside
        before = files_under(tmp_path)
        for name, call in calls(ctx, dest):
            for sid in hostile_ids(tmp_path, own):
                with pytest.raises(FileNotFoundError) as refused:
                    call(sid)
                message = str(refused.value)
                assert "\n" not in message, (name, sid, message)  # one line
                if sid != LINKED:
                    assert message.startswith(f"{sid!r} is not a checkpoint's storage id"), (name, message)
                else:
                    assert message == (
                        f"checkpoint {LINKED}: {root / LINKED} is a symbolic link, not a checkpoint "
                        f"directory of {root}"
                    )
            with pytest.raises(FileNotFoundError, match=f"no checkpoint '{ABSENT}' in {root}"):
                call(ABSENT)
        assert files_under(tmp_path) == before  # nothing removed, nothing copied
        assert not dest.exists()

        # Reading another experiment's checkpoint is fine; deleting it is not.
        assert ctx.checkpoint.get_metadata(OTHER)["experiment_id"] == 1
        with pytest.raises(PermissionError) as refused:
            ctx.checkpoint.delete(OTHER)
        assert str(refused.value) == (
            f"checkpoint {OTHER} belongs to experiment 1 of the store {_det_lite_home / 'det-lite.db'}: "
            "not deleted; outside det-lite's trials a script deletes only checkpoints of no experiment"
        )
        assert (root / OTHER / "state.json").is_file()

        # Its own checkpoint: a link planted in it that leaves it is refused, nothing copied.
        with pytest.raises(UnsafeNameError) as refused:
            ctx.checkpoint.download(own, str(dest))
        assert str(refused.value) == (
            f"checkpoint {root / own}: refused to copy the symbolic link leak (to the absolute path "
            f"{tmp_path / 'outside' / 'secret.txt'}): a copied link must stay inside the checkpoint; "
            "nothing was written"
        )
        assert not dest.exists()
        os.remove(root / own / "leak")
        ctx.checkpoint.download(own, str(dest))
        assert sorted(os.listdir(dest)) == ["metadata.json", "w.txt"] and (dest / "w.txt").read_text() == "3"
        ctx.checkpoint.delete(own)
        assert sorted(os.listdir(root)) == sorted([OTHER, LINKED])
    assert (tmp_path / "outside" / "secret.txt").read_text() == "not a checkpoint"


@pytest.mark.timeout(300)
def test_a_trial_deletes_only_its_own_experiments_checkpoints(tmp_path: Path, _det_lite_home) -> None:
    proc = cli("experiment", "create", os.path.join(SCRIPTS, "core.yaml"), SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (victim,) = describe(1)["trials"][0]["checkpoints"]
    out = tmp_path / "outcomes.json"
    config = write_config(
        os.path.join(SCRIPTS, "core.yaml"),
        tmp_path,
        entrypoint="python3 core_storage_ids.py",
        hyperparameters={"victim": victim["uuid"], "out": str(out)},
        searcher={"name": "single", "metric": "val_loss"},
    )
    proc = cli("experiment", "create", config, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = json.loads(out.read_text())
    own = outcomes.pop("own")
    for sid in ["..", ".", "", "a/../..", "/"]:
        for call in ("restore_path", "download", "get_metadata", "delete"):
            assert outcomes.pop(f"{call}({sid!r})").startswith(
                f"CheckpointIdError: {sid!r} is not a checkpoint's storage id"
            )
    store = os.path.realpath(_det_lite_home / "det-lite.db")
    assert outcomes == {
        "get_metadata(victim)": "ok",
        "delete(victim)": f"PermissionError: checkpoint {victim['uuid']} belongs to experiment 1 of the "
        f"store {store}: not deleted; a trial deletes only its own experiment's checkpoints "
        f"(experiment 2 of the store {store})",
        "delete(own)": "ok",
    }
    assert describe(1)["trials"][0]["checkpoints"] == [victim]  # its store row too
    assert os.path.isfile(os.path.join(victim["path"], "state.json"))
    (trial,) = describe(2)["trials"]
    assert trial["state"] == "COMPLETED" and trial["checkpoints"] == []
    assert not os.path.exists(os.path.join(os.path.dirname(victim["path"]), own))
    assert uuidlib.UUID(own)
