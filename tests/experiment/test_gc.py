"""No orphans: `checkpoint gc`, `experiment delete`, `kill` and the runner reconcile checkpoint
directories with the store, and touch only what the store says should not be kept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any, Dict, Optional, Set

import pytest

from determined_lite.experiment import _gc
from determined_lite.experiment._gc import collect_garbage, delete_experiment_files
from determined_lite.storage import DELETED_PREFIX, TMP_GRACE_S, writer_record
from determined_lite.store import Store
from tests.cli_helpers import cli, describe, trials_so_far, write_config
from tests.experiment.test_experiment_e2e import LINEAR, REPO, assert_closed_form_validations
from tests.timing import budget

pytestmark = pytest.mark.timeout(240)


def dead_writer() -> Dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    # A bogus start token: even if the pid were reused, it would not be that process.
    return {"host": socket.gethostname(), "pid": proc.pid, "token": "0"}


def plant(
    root: Path,
    meta: Optional[Dict[str, Any]],
    *,
    temporary: bool = False,
    name: Optional[str] = None,
    age_s: float = 0.0,
) -> Path:
    """A checkpoint directory as a writer would leave it (metadata.json, a state file)."""
    name = name or str(uuidlib.uuid4())
    path = root / (f".tmp-{name}" if temporary else name)
    path.mkdir(parents=True)
    (path / "state_dict.pth").write_bytes(b"\0" * 64)
    if meta is not None:
        (path / "metadata.json").write_text(json.dumps(dict(meta, uuid=name)))
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return path


def names(root: Path) -> Set[str]:
    return set(os.listdir(root)) if root.exists() else set()


def settled(*parents: Path) -> None:
    """Wait until what `experiment delete` moved aside in ``parents`` is removed (in the background)."""
    deadline = time.monotonic() + budget(60)
    while any(n.startswith(DELETED_PREFIX) for p in parents for n in names(p)):
        assert time.monotonic() < deadline, [names(p) for p in parents]
        time.sleep(0.1)


@pytest.fixture
def store(_det_lite_home: Path) -> Store:
    return Store()


def test_gc_removes_orphans_registers_resumable_checkpoints_and_keeps_the_rest(
    store: Store, _det_lite_home: Path
) -> None:
    home, root = _det_lite_home, _det_lite_home / "checkpoints"
    ours = os.path.realpath(store.path)
    conf: Dict[str, Any] = {"searcher": {"name": "single"}}
    done = store.experiments.create(conf, "/ctx", None, state="COMPLETED")
    t_done = store.trials.create(done, 1, {}, 0, state="COMPLETED")
    paused = store.experiments.create(conf, "/ctx", None, state="PAUSED")
    t_paused = store.trials.create(paused, 1, {}, 0, state="PAUSED")
    for batches in (2, 4):
        store.metrics.add_training(t_paused, batches, {"loss": 1.0})

    def meta(exp: Optional[int], trial: Optional[int], batches: int, **extra: Any) -> Dict[str, Any]:
        found = {"experiment_id": exp, "trial_id": trial, "total_batches": batches, "store": ours}
        return dict(found, writer=dead_writer(), **extra)

    registered = plant(root, meta(done, t_done, 4))
    store.checkpoints.add(t_done, registered.name, str(registered), 4)
    paused_ckpt = plant(root, meta(paused, t_paused, 2))
    store.checkpoints.add(t_paused, paused_ckpt.name, str(paused_ckpt), 2)
    gone = str(root / "0f0f0f0f-gone")  # registered, its directory deleted by hand
    store.checkpoints.add(t_done, "0f0f0f0f-gone", gone, 2)

    removed = {
        plant(root, meta(done, t_done, 2)).name,  # renamed into place, never registered; trial finished
        plant(root, meta(paused, t_paused, 6)).name,  # beyond the store's metrics: resuming would leave a gap
        plant(root, meta(99, 5, 4)).name,  # experiment 99 was deleted
        # Written before det-lite recorded store and writer: this home's default root, unchanged for long.
        plant(root, {"experiment_id": 99, "trial_id": 5, "total_batches": 4}, age_s=TMP_GRACE_S + 60).name,
        plant(root, meta(done, t_done, 8), temporary=True).name,  # writer died while writing
        plant(root, None, temporary=True, name="old-unknown", age_s=TMP_GRACE_S + 60).name,
    }
    resumable = plant(root, meta(paused, t_paused, 4, validation_metrics={"loss": 0.5}))
    kept = {
        registered.name,
        paused_ckpt.name,
        plant(root, meta(99, 5, 4, store="/elsewhere/det-lite.db")).name,  # another store's
        plant(root, meta(None, None, 4)).name,  # plain Python
        plant(root, dict(meta(99, 5, 4), writer=writer_record())).name,  # its writer runs
        plant(root, None, temporary=True, name="young-unknown").name,
        plant(root, dict(meta(done, t_done, 8), writer=writer_record()), temporary=True).name,
    }
    other_root = home / "elsewhere"
    legacy_elsewhere = plant(other_root, {"experiment_id": 99, "trial_id": 5, "total_batches": 4})
    for leftover in ("experiments/99/context", "tensorboard/experiment_99/trial_5", f"experiments/{done}"):
        (home / leftover).mkdir(parents=True)
    staging = home / "experiments" / ".tmp-context-dead"
    staging.mkdir()
    os.utime(staging, (time.time() - TMP_GRACE_S - 60,) * 2)

    before = names(root)
    dry = cli("checkpoint", "gc", "--dry-run", check=True).stdout
    assert names(root) == before and store.checkpoints.get("0f0f0f0f-gone") is not None
    why = "an unfinished checkpoint whose writer is gone"
    assert f"would be removed: {root / '.tmp-old-unknown'} ({why})" in dry

    proc = cli("checkpoint", "gc", check=True)
    assert names(root) == kept | {resumable.name}
    assert removed.isdisjoint(names(root))
    assert names(other_root) == {legacy_elsewhere.name}  # no store named: only the default root's
    assert store.checkpoints.get("0f0f0f0f-gone") is None
    registered_now = store.checkpoints.get(resumable.name)
    assert registered_now is not None
    assert (registered_now["total_batches"], registered_now["metrics"]) == (4, {"loss": 0.5})
    assert store.trials.get(t_paused)["latest_checkpoint"] == resumable.name
    assert names(home / "experiments") == {str(done)}
    assert names(home / "tensorboard") == set()
    assert proc.stdout.splitlines()[-1] == "checkpoint gc: 3 in use, 1 registered, 9 removed, 1 forgotten"


def test_gc_leaves_a_running_experiment_alone(store: Store, _det_lite_home: Path) -> None:
    exp = store.experiments.create({}, "/ctx", None)
    trial = store.trials.create(exp, 1, {}, 0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.experiments.set_pid(exp, sleeper.pid)
        meta = {"experiment_id": exp, "trial_id": trial, "total_batches": 2, "writer": dead_writer()}
        meta["store"] = os.path.realpath(store.path)
        orphan = plant(_det_lite_home / "checkpoints", meta)
        report = collect_garbage(store)
        assert orphan.is_dir()
        assert report.lines() == [f"in use: {orphan} (experiment {exp} is running)"]
    finally:
        sleeper.kill()
        sleeper.wait()
    collect_garbage(store)
    assert not orphan.exists()


def _experiment_with_files(store: Store, home: Path, files: int) -> Dict[str, Any]:
    """A finished experiment whose run directory holds ``files`` files in 10 folders."""
    exp = store.experiments.create({"searcher": {"name": "single"}}, "/ctx", None, state="COMPLETED")
    for i in range(files):
        path = home / "experiments" / str(exp) / "context" / f"d{i % 10}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return store.experiments.get(exp)


def test_delete_moves_the_files_aside_whatever_they_hold(
    store: Store, _det_lite_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: deleting an experiment with a 10,000-file context took 22.6 s, all of it the
    file system unlinking one file at a time. `experiment delete` renames its directories aside
    (calls that do not grow with the files) and leaves the unlinking to a background process."""
    calls: Dict[str, int] = {}
    for name in ("unlink", "remove", "rmdir", "scandir", "rename"):
        real = getattr(os, name)
        monkeypatch.setattr(
            os,
            name,
            lambda *a, _n=name, _f=real, **k: calls.update({_n: calls.get(_n, 0) + 1}) or _f(*a, **k),
        )
    seen = []
    for files in (20, 400):
        calls.clear()
        experiment = _experiment_with_files(store, _det_lite_home, files)
        store.experiments.delete(experiment["id"])
        report = delete_experiment_files(store, experiment, [])
        seen.append(dict(calls))
        run_dir = _det_lite_home / "experiments" / str(experiment["id"])
        assert report.lines() == [f"removed: {run_dir} (files of experiment {experiment['id']})"]
        assert not run_dir.exists()
    assert seen[0] == seen[1] == {"rename": 1}  # no unlink here: the background's work
    monkeypatch.undo()
    settled(_det_lite_home / "experiments")
    assert names(_det_lite_home / "experiments") == set()


def test_gc_removes_what_a_killed_background_delete_left(
    store: Store, _det_lite_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_gc, "remove_in_background", lambda paths: None)  # killed before it began
    experiment = _experiment_with_files(store, _det_lite_home, 30)
    store.experiments.delete(experiment["id"])
    delete_experiment_files(store, experiment, [])
    (left,) = names(_det_lite_home / "experiments")
    assert left.startswith(f"{DELETED_PREFIX}{experiment['id']}-")
    path = _det_lite_home / "experiments" / left
    assert collect_garbage(store).lines() == [f"removed: {path} (moved aside by `experiment delete`)"]
    assert names(_det_lite_home / "experiments") == set()


# --- through the CLI, with real trials ------------------------------------------------------


def linear_context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    shutil.copytree(LINEAR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    return ctx


def an_orphan_of(checkpoint: Dict[str, Any], **changes: Any) -> Path:
    """A copy of a registered checkpoint under a new uuid, never registered, its writer dead."""
    source = Path(checkpoint["path"])
    dest = source.parent / str(uuidlib.uuid4())
    shutil.copytree(source, dest)
    meta = json.loads((dest / "metadata.json").read_text())
    meta.update(uuid=dest.name, writer=dead_writer(), **changes)
    (dest / "metadata.json").write_text(json.dumps(meta))
    return dest


def test_delete_removes_everything_of_the_experiment(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = linear_context(tmp_path)
    for _ in range(2):
        proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx), "--test")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    root, home = _det_lite_home / "checkpoints", _det_lite_home
    (first,) = describe(1)["trials"][0]["checkpoints"]
    (second,) = describe(2)["trials"][0]["checkpoints"]
    orphan = an_orphan_of(first)
    unfinished = an_orphan_of(first)
    tmp = unfinished.rename(root / f".tmp-{unfinished.name}")
    plain = plant(root, {"experiment_id": None, "trial_id": None, "total_batches": 1})
    assert (home / "experiments" / "1" / "context" / "model_def.py").is_file()
    assert (home / "tensorboard" / "experiment_1").is_dir()

    proc = cli("experiment", "delete", "1", "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "Deleted experiment 1 (1 checkpoint(s))."
    assert not (home / "experiments" / "1").exists() and not Path(first["path"]).exists()
    settled(root, home / "experiments", home / "tensorboard")
    assert names(root) == {second["uuid"], plain.name}
    assert not orphan.exists() and not tmp.exists()
    assert names(home / "experiments") == {"2"}
    assert names(home / "tensorboard") == {"experiment_2"}


def _start(config: str, ctx: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, str(ctx)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def test_kill_of_an_experiment_without_a_process_removes_what_it_left(
    tmp_path: Path, _det_lite_home: Path
) -> None:
    ctx = linear_context(tmp_path)
    config = write_config(
        str(ctx / "const.yaml"),
        tmp_path,
        **{"hyperparameters.sleep_s": 0.1, "searcher.max_length": {"batches": 40}},
    )
    proc = _start(config, ctx)
    deadline = time.monotonic() + budget(90)
    trials: list = []
    while not (trials and trials[0]["checkpoints"]):
        assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint registered in time"
        time.sleep(0.3)
        trials = trials_so_far(1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    time.sleep(3)  # its workers notice and stop
    (trial,) = describe(1)["trials"]
    orphan = an_orphan_of(trial["checkpoints"][-1])

    out = cli("experiment", "kill", "1", check=True).stdout
    assert f"removed: {orphan} (never registered; trial {trial['id']} does not need it)" in out
    assert describe(1)["state"] == "CANCELED"
    # Whatever the killed processes left (a checkpoint renamed, not yet registered; a .tmp-) is gone too.
    (trial,) = describe(1)["trials"]
    assert names(_det_lite_home / "checkpoints") == {c["uuid"] for c in trial["checkpoints"]}


KILLER = '''
import os
import signal

from determined_lite import pytorch
from model_def import LinearTrial


class DieAfterRename(pytorch.PyTorchCallback):
    """SIGKILL the chief once, right after a checkpoint is renamed into place (before the store
    registers it, which waits for the flush)."""

    def __init__(self, marker):
        self.marker = marker

    def on_checkpoint_write_end(self, checkpoint_dir):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


class KilledTrial(LinearTrial):
    def build_callbacks(self):
        return {"die": DieAfterRename(self.context.get_hparam("marker"))}
'''


def test_a_worker_killed_after_the_rename_leaves_no_orphan(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = linear_context(tmp_path)
    (ctx / "killer.py").write_text(KILLER)
    config = write_config(
        str(ctx / "const.yaml"),
        tmp_path,
        **{"entrypoint": "killer:KilledTrial", "hyperparameters.marker": str(tmp_path / "died")},
    )
    proc = cli("experiment", "create", config, str(ctx))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    assert_closed_form_validations(trial)
    logs = cli("experiment", "logs", "1", check=True).stdout
    # The checkpoint the killed worker renamed at batch 4 was registered, and the restart resumed there.
    assert "registered: " in logs and "(batch 4)" in logs
    assert names(_det_lite_home / "checkpoints") == {c["uuid"] for c in trial["checkpoints"]}
