"""A checkpoint's code costs the same whatever the context holds (issue 28, item 7).

With 10,000 small files in the context, every checkpoint hard-linked and fsynced each of them
(40-50 s per checkpoint) and held 10,000 directory entries that `experiment delete` removed one
by one. The snapshot never changes: its code is put on disk once and each checkpoint links to it.
The cost is counted in work (links, copies, fsyncs, entries), never timed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from determined_lite.pytorch import _checkpoint
from determined_lite.storage import CODE_DIR, SNAPSHOT_MANIFEST, make_durable, read_context, snapshot_context

MANY = 10_000
CHECKPOINTS = 4


class Work:
    """Counts the file-system work of the code under test (fsyncs are counted, not done)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Dict[str, int] = {"link": 0, "copy": 0, "fsync": 0, "sync": 0}
        link, copy2 = os.link, shutil.copy2

        def counted_link(*args, **kwargs):
            self.counts["link"] += 1
            return link(*args, **kwargs)

        def counted_copy2(*args, **kwargs):
            self.counts["copy"] += 1
            return copy2(*args, **kwargs)

        def counted(name: str):
            def call(*_args, **_kwargs) -> None:
                self.counts[name] += 1

            return call

        monkeypatch.setattr(os, "link", counted_link)
        monkeypatch.setattr(shutil, "copy2", counted_copy2)
        monkeypatch.setattr(os, "fsync", counted("fsync"))
        monkeypatch.setattr(os, "sync", counted("sync"))

    def take(self) -> Dict[str, int]:
        taken = dict(self.counts)
        for name in self.counts:
            self.counts[name] = 0
        return taken


def snapshot_of(tmp_path: Path, name: str, files: int) -> Path:
    ctx = tmp_path / f"{name}-ctx"
    for i in range(files):
        path = ctx / f"pkg{i % 100:02d}" / f"m{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"X = {i}\n")
    snap = tmp_path / f"{name}-snapshot"
    snapshot_context(read_context(str(ctx)), str(snap), source=str(ctx))
    return snap


def entries(path: str) -> int:
    """What removing ``path`` removes: its files, links and directories (links not followed)."""
    return sum(1 + len(dirs) + len(files) for _, dirs, files in os.walk(path))


def checkpoints(root: Path, snap: Path, work: Work) -> List[Dict[str, int]]:
    """Write CHECKPOINTS checkpoints as the training loop does (written, then made durable);
    the work each one took."""
    done = []
    for batch in range(1, CHECKPOINTS + 1):
        state = {"w": torch.full((4,), float(batch))}
        _, path = _checkpoint.write_checkpoint(
            str(root), state, {"total_batches": batch}, str(snap), durable=False
        )
        make_durable(path)
        done.append(dict(work.take(), entries=entries(path)))
    return done


def test_a_checkpoint_costs_the_same_with_10000_files_in_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many, one = snapshot_of(tmp_path, "many", MANY), snapshot_of(tmp_path, "one", 1)
    work = Work(monkeypatch)
    with_many = checkpoints(tmp_path / "ckpts", many, work)
    with_one = checkpoints(tmp_path / "ckpts", one, work)

    # Every checkpoint after the first does the same work as with a 1-file context: no link,
    # copy or fsync per file, and a handful of entries to remove.
    assert with_many[1:] == with_one[1:]
    # The first one puts the snapshot's code on disk once: a link per file, one sync.
    assert with_many[0]["link"] == MANY + 1 and with_many[0]["sync"] == 1  # + the manifest
    for cost in with_many[1:]:
        assert cost["link"] == cost["copy"] == cost["sync"] == 0, cost
        assert cost["fsync"] <= 4 and cost["entries"] <= 4, cost
    # And the first one leaves no more entries in the checkpoint than the others.
    assert with_many[0]["entries"] == with_many[1]["entries"]


def test_checkpoints_link_the_sealed_code_and_copies_stand_alone(tmp_path: Path) -> None:
    from determined_lite.storage import SEALED_CODE, code_reference, copy_checkpoint

    snap = snapshot_of(tmp_path, "ctx", 3)
    (snap / "written_by_the_trial.txt").write_text("the trial's working directory, not its code")
    root = tmp_path / "ckpts"
    paths = [
        _checkpoint.write_checkpoint(str(root), {"w": torch.ones(1)}, {"total_batches": b}, str(snap))[1]
        for b in (1, 2)
    ]
    sealed = snap / SEALED_CODE
    for path in paths:
        code = Path(path) / CODE_DIR
        assert code.is_symlink() and not os.path.isabs(os.readlink(code))
        assert code_reference(str(code)) == str(sealed.resolve())
        assert sorted(os.listdir(code)) == [SNAPSHOT_MANIFEST, "pkg00", "pkg01", "pkg02"]
        assert (code / "pkg02" / "m00002.py").read_text() == "X = 2\n"
        assert os.stat(code / "pkg02" / "m00002.py").st_ino == os.stat(snap / "pkg02" / "m00002.py").st_ino
    # A copy (checkpoint export, the Core API's download) holds the code itself.
    copy = tmp_path / "exported"
    copy_checkpoint(paths[0], str(copy))
    assert not (copy / CODE_DIR).is_symlink()
    assert (copy / CODE_DIR / "pkg01" / "m00001.py").read_text() == "X = 1\n"
    assert os.stat(copy / CODE_DIR / "pkg01" / "m00001.py").st_nlink == 1
    # Removing a checkpoint removes its link, never the code the others use.
    shutil.rmtree(paths[0])
    assert (Path(paths[1]) / CODE_DIR / "pkg00" / "m00000.py").read_text() == "X = 0\n"


def test_a_checkpoint_root_on_another_file_system_gets_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from determined_lite.storage import SEALED_CODE

    snap = snapshot_of(tmp_path, "ctx", 2)
    real_stat = os.stat
    root = tmp_path / "ckpts"

    class Elsewhere:  # the checkpoint root's device differs from the snapshot's
        def __init__(self, st: os.stat_result) -> None:
            self._st = st

        def __getattr__(self, name: str):
            return getattr(self._st, name)

        @property
        def st_dev(self) -> int:
            return self._st.st_dev + 1

    def stat(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        return Elsewhere(st) if str(path).startswith(str(root)) else st

    monkeypatch.setattr(os, "stat", stat)
    _, path = _checkpoint.write_checkpoint(str(root), {"w": torch.ones(1)}, {"total_batches": 1}, str(snap))
    monkeypatch.undo()
    code = Path(path) / CODE_DIR
    assert not code.is_symlink() and (code / "pkg01" / "m00001.py").read_text() == "X = 1\n"
    assert not (snap / SEALED_CODE).exists()
