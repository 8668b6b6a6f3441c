"""Everything det-lite writes is private: directories 0700, files 0600, a stricter umask kept.

Unit checks of the store, the helpers and a checkpoint written from plain Python; then a real
``det-lite experiment create --detach`` under a permissive umask (0o022) and a strict one
(0o077), whose ``$DET_LITE_HOME`` is checked while the experiment runs (SQLite's WAL and SHM
files exist then) and after.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from typing import Dict, Iterator, List

import pytest

from determined_lite.store import Store
from determined_lite.store._paths import make_private_dirs, private_umask, restrict_tree
from tests.cli_helpers import REPO, describe, write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
DIR_MODE, FILE_MODE = 0o700, 0o600
SNAPSHOT_FILE_MODE = 0o400  # the context snapshot's files (and their hard links in code/) are read-only


@pytest.fixture
def umask() -> Iterator:
    """``umask(value)`` sets this process's umask; the original comes back after the test."""
    original = os.umask(0o022)
    os.umask(original)
    yield os.umask
    os.umask(original)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _modes(root: str) -> Dict[str, int]:
    """``{path relative to root: mode}`` of everything under ``root`` (itself as '.')."""
    found = {".": _mode(root)}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(directory, name)
            if os.path.islink(path):  # no permissions of its own (always 0777 on Linux): a
                continue  # checkpoint's code/ link; what it names is checked where it lives
            try:
                found[os.path.relpath(path, root)] = _mode(path)
            except FileNotFoundError:  # a temporary file, renamed meanwhile
                continue
    return found


def _not_private(root: str, modes: Dict[str, int]) -> List[str]:
    bad = []
    for rel, mode in sorted(modes.items()):
        path = os.path.join(root, rel)
        if os.path.isdir(path) or rel.endswith("/"):
            expected = DIR_MODE
        elif "/context/" in f"/{rel}" or ("/code/" in f"/{rel}" and os.stat(path).st_nlink > 1):
            expected = SNAPSHOT_FILE_MODE  # a snapshot file, or its hard link in a checkpoint
        else:
            expected = FILE_MODE
        if mode != expected:
            bad.append(f"{rel}: {oct(mode)}")
    return bad


def test_store_is_private_under_a_permissive_umask(umask, _det_lite_home):
    umask(0o022)
    store = Store()
    store.experiments.create({"name": "x"}, None, None)  # a write: the WAL and SHM files exist now
    db = store.path
    assert os.path.exists(db + "-wal") and os.path.exists(db + "-shm")
    assert {p: oct(_mode(p)) for p in (str(_det_lite_home), db, db + "-wal", db + "-shm")} == {
        str(_det_lite_home): oct(DIR_MODE),
        db: oct(FILE_MODE),
        db + "-wal": oct(FILE_MODE),
        db + "-shm": oct(FILE_MODE),
    }


def test_an_older_world_readable_store_is_made_private(umask, _det_lite_home):
    umask(0o022)
    os.makedirs(_det_lite_home)  # as det-lite created it before: 0755, the database 0644
    sqlite3.connect(_det_lite_home / "det-lite.db").close()
    assert (_mode(str(_det_lite_home)), _mode(str(_det_lite_home / "det-lite.db"))) == (0o755, 0o644)
    Store().experiments.list()
    assert (_mode(str(_det_lite_home)), _mode(str(_det_lite_home / "det-lite.db"))) == (DIR_MODE, FILE_MODE)


def test_a_stricter_umask_is_respected(umask, tmp_path):
    umask(0o027)  # looser than private for group: det-lite's processes mask it all
    assert private_umask() == 0o077
    umask(0o177)  # stricter than private: kept, never widened
    assert private_umask() == 0o177
    make_private_dirs(str(tmp_path / "a" / "b"))
    assert (_mode(str(tmp_path / "a")), _mode(str(tmp_path / "a" / "b"))) == (0o600, 0o600)
    os.chmod(tmp_path / "a", 0o700)  # (so that pytest can clean up)


def test_a_checkpoint_from_plain_python_is_private(umask, tmp_path):
    from determined_lite.pytorch._checkpoint import write_checkpoint

    umask(0o022)
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "model.py").write_text("x = 1\n")
    os.chmod(code / "pkg" / "model.py", 0o644)
    _, path = write_checkpoint(str(tmp_path / "ckpts"), {"w": 1}, {"total_batches": 1}, str(code))
    modes = _modes(path)
    assert set(modes) == {".", "state_dict.pth", "metadata.json", "code", "code/pkg", "code/pkg/model.py"}
    assert _not_private(path, modes) == []
    assert _mode(str(tmp_path / "ckpts")) == DIR_MODE
    restrict_tree(str(tmp_path / "missing"))  # nothing there: nothing to do


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_an_experiment_writes_only_private_files(tmp_path, _det_lite_home, mask):
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{"hyperparameters.sleep_s": 0.1, "checkpoint_policy": "all"},
    )
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, LINEAR, "--detach"],
        capture_output=True,
        text=True,
        cwd=REPO,
        umask=mask,
        timeout=budget(60),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    home = str(_det_lite_home)
    seen: Dict[str, int] = {}
    deadline = time.monotonic() + budget(180)
    while time.monotonic() < deadline:
        seen.update(_modes(home))  # while it runs: the WAL and SHM files, temporary files
        if describe(1)["state"] != "ACTIVE":
            break
        time.sleep(0.1)
    seen.update(_modes(home))
    assert describe(1)["state"] == "COMPLETED"
    names = {os.path.basename(p) for p in seen}
    # What the run wrote: the store and its WAL, the runner's files, checkpoints, TensorBoard.
    expected = {"det-lite.db", "det-lite.db-wal", "det-lite.db-shm", "runner.log", "runner.lock"}
    expected |= {"spec.json", "result.json", "state_dict.pth", "metadata.json", "model_def.py"}
    assert expected <= names, sorted(names)
    assert any(n.startswith("events.out.tfevents") for n in names)
    assert _not_private(home, {p: m for p, m in seen.items() if os.path.exists(os.path.join(home, p))}) == []
    assert all(m & 0o077 == 0 for m in seen.values()), {p: oct(m) for p, m in seen.items() if m & 0o077}


def test_the_store_may_live_outside_the_home(tmp_path, _det_lite_home, monkeypatch):
    """``$DET_LITE_DB`` puts the store elsewhere (a driver pod's persistent volume): an experiment
    records there, its run files stay in the home, and ``describe`` reads the store there."""
    from tests.cli_helpers import cli

    db = tmp_path / "volume" / "runs.db"
    monkeypatch.setenv("DET_LITE_DB", str(db))
    linear = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
    path = write_config(os.path.join(linear, "const.yaml"), tmp_path, "exp.yaml")
    proc = cli("experiment", "create", path, linear, timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert db.is_file() and stat.S_IMODE(db.stat().st_mode) == 0o600
    assert not (_det_lite_home / "det-lite.db").exists()
    assert (_det_lite_home / "experiments" / "1").is_dir()  # the run files: in the home
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12
    assert Store(str(db)).home == str(_det_lite_home)
