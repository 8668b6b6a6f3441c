"""Reused workers (launch/_reuse.py): a trial run in a worker that ran an earlier trial of its
experiment gets exactly the result a fresh process gives; a worker whose trial left something
behind, crashed or was killed never runs another."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading
import time
from typing import Callable, Dict, List, Set

import pytest
import torch

import determined_lite.pytorch  # noqa: F401 -- in the fork server's image, as in a worker
from determined_lite.launch import _forkserver, _reuse
from tests.cli_helpers import REPO, cli, describe, write_config
from tests.timing import budget

POLLUTER = os.path.join(REPO, "tests", "fixtures", "experiments", "polluter")
# What each trial leaves behind, in the grid's order: reset ones (none, global, env) let the next
# trial run in the same process; the others, a crash and a kill do not.
PLAN = [
    "none",
    "global",
    "env",
    "dtype",
    "none",
    "relu",
    "none",
    "thread",
    "none",
    "atexit",
    "none",
    "handler",
    "none",
    "child",
    "none",
    "raise_once",
    "none",
    "kill_once",
    "none",
    "none",
]
NAMES = [f"{i}:{what}" for i, what in enumerate(PLAN)]  # unique grid values
RESET = {"none", "global", "env"}
CRASHES = ("raise_once", "kill_once")  # the failed run's process ends; the restart's is reused


def _search(tmp_path, reuse: bool) -> Dict[str, object]:
    pid_dir = tmp_path / f"pids-{reuse}"
    pid_dir.mkdir()
    config = write_config(
        os.path.join(POLLUTER, "const.yaml"),
        tmp_path,
        name=f"exp-{reuse}.yaml",
        **{
            "hyperparameters.pid_dir": str(pid_dir),
            "hyperparameters.pollute": {
                "type": "categorical",
                "vals": [f"{i}:{w}" for i, w in enumerate(PLAN)],
            },
        },
    )
    home = str(tmp_path / f"home-{reuse}")
    env = dict(os.environ, DET_LITE_HOME=home, DET_LITE_REUSE_WORKERS="1" if reuse else "0")
    cli("experiment", "create", config, POLLUTER, env=env, check=True, timeout=400)
    trials = {t["hparams"]["pollute"]: t for t in describe(1, home=home)["trials"]}
    pids: Dict[int, List[int]] = {}
    for path in sorted(glob.glob(str(pid_dir / "trial-*-pid-*")), key=os.path.getmtime):
        trial, pid = map(int, re.findall(r"\d+", os.path.basename(path)))
        pids.setdefault(trial, []).append(pid)
    return {"trials": trials, "pids": pids}


def _last(trial: dict) -> dict:
    return trial["validation_metrics"][-1]["metrics"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_reused_workers_give_each_trial_a_fresh_process_result_and_polluters_are_not_reused(tmp_path):
    reused = _search(tmp_path, reuse=True)
    fresh = _search(tmp_path, reuse=False)
    for name in NAMES:
        ours, theirs = reused["trials"][name], fresh["trials"][name]  # type: ignore[index]
        assert ours["state"] == theirs["state"] == "COMPLETED", name
        assert _last(ours) == _last(theirs), name  # bit-exact: weights, loss, what it saw
        seen = _last(ours)
        assert (seen["starts"], seen["env_seen"], seen["dtype_fresh"], seen["relu_fresh"]) == (1, 0, 1, 1), (
            name
        )
    # Which process ran each trial: trial ids follow the grid's order.
    by_id = {t["id"]: t["hparams"]["pollute"].split(":", 1)[1] for t in reused["trials"].values()}  # type: ignore[union-attr]
    pids: Dict[int, List[int]] = reused["pids"]  # type: ignore[assignment]
    ids = sorted(by_id)
    assert [by_id[i] for i in ids] == PLAN
    for before, after in zip(ids, ids[1:]):
        last_pid = pids[before][-1]
        if by_id[before] in RESET:
            assert pids[after][0] == last_pid, (by_id[before], pids)
        else:
            later = {p for i in ids if i > before for p in pids[i]}
            assert last_pid not in later or by_id[before] in ("raise_once", "kill_once"), (
                by_id[before],
                pids,
            )
    for crashed in CRASHES:
        trial = next(i for i in ids if by_id[i] == crashed)
        first, restart = pids[trial]  # the run that failed, then its restart in a new process
        assert first != restart and first == pids[trial - 1][-1]
        assert first not in {p for i in ids if i > trial for p in pids[i]}
        assert pids[trial + 1][0] == restart
    assert len({p for runs in pids.values() for p in runs}) == 9  # 20 trials, 22 runs, 9 processes
    fresh_pids = [p for runs in fresh["pids"].values() for p in runs]  # type: ignore[union-attr]
    assert len(set(fresh_pids)) == len(fresh_pids) == 22  # switched off: one process a run
    # The last parked worker ends with its runner.
    deadline = time.monotonic() + budget(20)
    while _alive(pids[ids[-1]][-1]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pids[ids[-1]][-1])


# --- what a trial leaves behind, checked in a forked child as a worker is ---------------------


def _in_worker(trial: Callable[[], None]) -> object:
    """In a forked child in its own session, as the fork server's: what :func:`_reuse.left_behind`
    says after ``trial`` ran (between ``before_trial`` and the check)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read)
            os.setsid()
            before = _reuse.before_trial()
            trial()
            os.write(write, repr(_reuse.left_behind(before)).encode())
        except BaseException as e:  # noqa: B036 -- the parent reads what happened
            os.write(write, f"error {e!r}".encode())
            code = 1
        os.close(write)
        os.killpg(0, signal.SIGKILL)  # with whatever the trial started
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    os.waitpid(pid, 0)
    return said


def _set_dtype() -> None:
    torch.set_default_dtype(torch.float64)


def _hook() -> None:
    torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o)


def _patch() -> None:
    torch.nn.functional.gelu = torch.nn.functional.relu


def _new_attribute() -> None:
    import determined_lite.pytorch as dlp

    dlp.POLLUTED = True  # type: ignore[attr-defined]


def _thread() -> None:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


def _child() -> None:
    import subprocess
    import sys

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _fd() -> None:
    os.open(os.devnull, os.O_RDONLY)


def _signal() -> None:
    signal.signal(signal.SIGUSR2, lambda *_: None)


def _atexit() -> None:
    import atexit

    atexit.register(print)


def _logger_level() -> None:
    import logging

    logging.getLogger("torch").setLevel(logging.DEBUG)


def _global_callback() -> None:
    from determined_lite.pytorch import PyTorchCallback, register_global_callback

    register_global_callback(PyTorchCallback())


def _stdout() -> None:
    import io
    import sys

    sys.stdout = io.StringIO()


def _clean() -> None:
    import logging

    x = [torch.zeros(2) for _ in range(10)]  # objects made and dropped, a new logger, an import
    del x
    logging.getLogger("a.new.logger").info("hello")
    import json  # noqa: F401


@pytest.mark.parametrize(
    "trial, expected",
    [
        (_clean, "None"),
        (_set_dtype, "'torch settings'"),
        (_hook, "'module bindings'"),
        (_patch, "'module bindings'"),
        (_new_attribute, "'module bindings'"),
        (_global_callback, "'module bindings'"),
        (_stdout, "'sys'"),
        (_thread, "'threads'"),
        (_child, "'process group'"),
        (_fd, "'file descriptors'"),
        (_signal, "'signal handlers'"),
        (_atexit, "'atexit handlers'"),
        (_logger_level, "'loggers'"),
    ],
    ids=lambda v: getattr(v, "__name__", "").lstrip("_") or None,
)
def test_what_a_trial_leaves_behind_keeps_its_worker_from_being_reused(trial, expected):
    assert _in_worker(trial) == expected


def test_reset_forgets_the_trials_own_modules_and_restores_paths_and_warnings(tmp_path, monkeypatch):
    context = tmp_path / "context"
    context.mkdir()
    (context / "users_module.py").write_text("VALUE = []\n")
    monkeypatch.syspath_prepend(str(context))
    before = _reuse.before_trial()
    import uuid  # noqa: F401 -- a library module: kept (imported already or not, it is not the trial's)

    import users_module  # type: ignore[import-not-found]

    users_module.VALUE.append(1)
    import sys
    import types
    import warnings

    ours = "determined_lite._imported_by_the_trial"
    sys.modules[ours] = types.ModuleType(ours)

    sys.path.append("/a/path/of/the/trial")
    warnings.simplefilter("error")
    _reuse.reset(before, str(context))
    assert "users_module" not in sys.modules and "uuid" in sys.modules
    assert ours not in sys.modules  # det-lite's own: imported fresh by the next trial
    assert "/a/path/of/the/trial" not in sys.path
    assert tuple(warnings.filters) == before.warnings
    import users_module as again  # type: ignore[import-not-found]

    assert again.VALUE == []


# --- the runner's side: a parked process is not the run's any more -----------------------------


class _Server:
    lost = False


def test_a_stop_after_the_run_parked_never_reaches_the_process(monkeypatch):
    signalled: List[int] = []
    monkeypatch.setattr(_forkserver, "_killpg", lambda pid, sig: signalled.append(pid))
    server = _forkserver.ForkServer.__new__(_forkserver.ForkServer)
    server._lock, server._parked, server._children = threading.Lock(), {}, {}
    child = _forkserver.ForkedChild(server, 1, None, reuse_key="k")  # type: ignore[arg-type]
    child._started_as(4242, plain=False)
    server._children[1] = child
    server._dispatch({"rid": 1, "code": 0, "parked": True})
    assert child.returncode == 0 and child.parked and server._take_parked("k") == 4242
    child.kill_group(signal.SIGKILL)  # TrialProcess.wait's clean-up of the ended run
    assert signalled == []
    # A run stopped while it parks: its process is never handed to another run.
    other = _forkserver.ForkedChild(server, 2, None, reuse_key="k")  # type: ignore[arg-type]
    other._started_as(4343, plain=False)
    server._children[2] = other
    other.kill_group(signal.SIGTERM)
    server._dispatch({"rid": 2, "code": 0, "parked": True})
    assert signalled == [4343] and not other.parked and server._take_parked("k") == 0


def test_a_later_spec_at_the_same_path_is_read_anew(tmp_path, monkeypatch):
    """A reused worker's next run of the same trial (a restart, a promotion) has a new spec at
    the same path: ``det.get_cluster_info()`` reads it, not the last run's."""
    from determined_lite.runtime import _cluster
    from determined_lite.runtime._spec import WorkerSpec

    path = str(tmp_path / "spec.json")
    monkeypatch.setenv(_cluster.SPEC_ENV, path)
    spec = dict(entrypoint="model_def:T", context_dir="/ctx", exp_conf={}, hparams={"lr": 1}, settings={})
    common = dict(result_path="/r.json", max_length={"batches": 1}, trial_seed=1, trial_id=5, experiment_id=1)
    WorkerSpec(**spec, **common).save(path)  # type: ignore[arg-type]
    first = _cluster.get_cluster_info()
    assert first is not None and first.latest_checkpoint is None
    WorkerSpec(**spec, **common, latest_checkpoint=str(tmp_path)).save(path)  # type: ignore[arg-type]
    second = _cluster.get_cluster_info()
    assert second is not None and second.latest_checkpoint == tmp_path.name
    assert second is _cluster.get_cluster_info()
    assert len(_cluster._cache) == 1


def test_runs_share_workers_only_within_a_trial_class_experiment():
    from determined_lite.launch._launcher import reuse_key
    from determined_lite.runtime._spec import WorkerSpec

    def spec(**changes: object) -> WorkerSpec:
        fields: Dict[str, object] = dict(
            entrypoint="model_def:T",
            context_dir="/ctx",
            exp_conf={},
            hparams={},
            result_path="/r.json",
            max_length={"batches": 1},
            trial_seed=1,
            settings={},
            experiment_id=3,
            store_path="/home/det-lite.db",
        )
        fields.update(changes)
        return WorkerSpec(**fields)  # type: ignore[arg-type]

    keys: Set[str] = {reuse_key(spec()), reuse_key(spec(trial_id=9, hparams={"lr": 1}))}
    assert len(keys) == 1 and "" not in keys  # trials of one experiment share
    assert reuse_key(spec(experiment_id=4)) not in keys
    assert reuse_key(spec(context_dir="/other")) not in keys
    assert reuse_key(spec(experiment_id=None)) == ""
    assert reuse_key(spec(entrypoint="python3 train.py")) == ""  # a script: its interpreter is the user's
