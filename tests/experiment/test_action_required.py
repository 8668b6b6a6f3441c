"""Errors a restart cannot fix pause the experiment instead of failing it.

A full checkpoint volume is said once ("no space left on <path>"), the trial is not restarted,
and the experiment is PAUSED, so that ``activate`` resumes it from the intact checkpoint once
space is freed. A tampered checkpoint met on ``activate`` is refused without running it, and
the experiment stays resumable with ``DET_LITE_TRUST_CHECKPOINTS=1``. A full ``$DET_LITE_HOME``
is the one-line store error.

The disk fills by injection in the worker: the trial module of the context directory below
sends checkpoints to ``/dev/full`` (a real ENOSPC from the kernel) while a flag file exists.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Tuple

import pytest
import torch
from click.testing import CliRunner

from determined_lite.cli import cli as cli_group
from determined_lite.store import Store
from determined_lite.store import _db as store_db
from tests.cli_helpers import cli, describe, write_config
from tests.experiment.test_experiment_e2e import LINEAR, assert_closed_form_validations

pytestmark = pytest.mark.timeout(240)

FULL_DISK_TRIAL = '''"""LinearTrial whose checkpoint volume is full while FLAG exists (after the
first checkpoint each worker process writes): checkpoints go to /dev/full."""
import errno
import os

import torch

from model_def import LinearTrial

FLAG = {flag!r}  # outside the context: trials run from its snapshot
_real_save = torch.save
_saves = []


def _save(obj, f, *args, **kwargs):
    _saves.append(1)
    if len(_saves) > 1 and os.path.exists(FLAG):
        if os.path.exists("/dev/full"):
            with open("/dev/full", "wb") as full:
                _real_save(obj, full, *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real_save(obj, f, *args, **kwargs)


torch.save = _save


class FullDiskTrial(LinearTrial):
    pass
'''


def _flag(tmp_path: Path) -> Path:
    """While this file exists, the trial's checkpoint volume is full."""
    return tmp_path / "disk_full.flag"


def _paused_by_full_disk(tmp_path: Path) -> Tuple[Path, Path, str]:
    """Run an experiment whose second checkpoint meets a full disk: (context, checkpoint root,
    output of `experiment create`)."""
    context = tmp_path / "context"
    context.mkdir()
    shutil.copy(os.path.join(LINEAR, "model_def.py"), context / "model_def.py")
    (context / "full_disk.py").write_text(FULL_DISK_TRIAL.replace("{flag!r}", repr(str(_flag(tmp_path)))))
    _flag(tmp_path).touch()
    root = tmp_path / "ckpts"
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        entrypoint="full_disk:FullDiskTrial",
        min_checkpoint_period={"batches": 2},
        checkpoint_storage={"host_path": str(root)},
    )
    proc = cli("experiment", "create", config, str(context))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    return context, root, out


def test_full_disk_pauses_once_and_activate_resumes(tmp_path: Path) -> None:
    context, root, out = _paused_by_full_disk(tmp_path)
    assert out.count("no space left on") == 1, out
    assert f"no space left on {root}: the checkpoint at batch 4 could not be written" in out
    assert "Traceback" not in out and "restarting" not in out, out
    assert "experiment 1 paused; resume with: det-lite experiment activate 1" in out
    exp = describe(1)
    assert exp["state"] == "PAUSED"
    (trial,) = exp["trials"]
    assert trial["state"] == "PAUSED" and trial["restarts"] == 0
    assert [c["total_batches"] for c in trial["checkpoints"]] == [2]
    assert sorted(os.listdir(root)) == [trial["checkpoints"][0]["uuid"]]

    _flag(tmp_path).unlink()  # space freed
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    (trial,) = exp["trials"]
    assert trial["total_batches"] == 12 and trial["restarts"] == 0
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    assert_closed_form_validations(trial)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def test_tampered_checkpoint_is_refused_on_activate_until_trusted(tmp_path: Path) -> None:
    context, root, _ = _paused_by_full_disk(tmp_path)
    _flag(tmp_path).unlink()
    (checkpoint,) = describe(1)["trials"][0]["checkpoints"]
    state_path = Path(checkpoint["path"]) / "state_dict.pth"
    state = torch.load(state_path, weights_only=True)
    marker = tmp_path / "payload-ran"
    state["trainer"]["extra"] = _Payload(marker)
    torch.save(state, state_path)

    proc = cli("experiment", "activate", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert out.count("needs full unpickling") == 1, out
    assert "set DET_LITE_TRUST_CHECKPOINTS=1" in out and "Traceback" not in out, out
    assert not marker.exists()
    exp = describe(1)
    assert exp["state"] == "PAUSED" and exp["trials"][0]["restarts"] == 0

    proc = cli("experiment", "activate", "1", env={**os.environ, "DET_LITE_TRUST_CHECKPOINTS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.exists()
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12
    assert_closed_form_validations(trial)


def test_full_store_is_one_line(monkeypatch: pytest.MonkeyPatch, _det_lite_home: Path) -> None:
    """SQLite says SQLITE_FULL (a page limit stands in for the full disk): one line, exit 1."""
    Store()  # the store exists; from now on it cannot grow
    connect = sqlite3.connect

    def full_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.execute("PRAGMA max_page_count = 1")  # clamps to the current size
        return conn

    monkeypatch.setattr(store_db.sqlite3, "connect", full_connect)
    result = CliRunner().invoke(
        cli_group, ["experiment", "create", os.path.join(LINEAR, "const.yaml"), LINEAR]
    )
    db = _det_lite_home / "det-lite.db"
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (
        f"det-lite: error: no space left on {_det_lite_home}: the det-lite store {db} cannot be written "
        "(database or disk is full)\n"
    )
