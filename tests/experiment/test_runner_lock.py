"""One runner per experiment (``determined_lite/experiment/_lock.py``).

Two ``activate`` at once, or ``activate`` right after ``create --detach``: one runner, the other
command exits 2 naming the process that runs the experiment. ``activate`` while the previous
run is still exiting waits for it, and gives up after ``$DET_LITE_ACTIVATE_WAIT`` seconds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from determined_lite.searcher import load_config
from determined_lite.store import Store
from tests.cli_helpers import REPO, cli, describe, write_config
from tests.experiment.test_experiment_e2e import assert_closed_form_validations, closed_form
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
CLI = [sys.executable, "-m", "determined_lite.cli"]

pytestmark = pytest.mark.timeout(240)

# Takes experiment 1's runner lock like a runner, says so, and holds it as one that is exiting
# (phase "stopping", e.g. a paused runner still flushing) for argv[1] seconds.
HOLDER = """
import os, sys, time
from determined_lite.experiment._lock import RunnerPhase, take_runner_lock
lock = take_runner_lock(1, wait_s=0)
lock.record(os.getpid(), RunnerPhase.STOPPING)
print("locked", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _slow_config(tmp_path, batches: int = 12) -> str:
    return write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{"hyperparameters.sleep_s": 0.1, "searcher.max_length": {"batches": batches}},
    )


def _paused_experiment(tmp_path) -> None:
    """Experiment 1, PAUSED before it ran anything (activate runs it from the start)."""
    raw = load_config(_slow_config(tmp_path)).to_dict()
    Store().experiments.create(raw, LINEAR, None, state="PAUSED")


def _hold_lock(seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def _starts(experiment_id: int = 1) -> int:
    """How many times a runner started a trial of the experiment."""
    return sum("starts: train to" in line["line"] for line in Store().logs.list(experiment_id=experiment_id))


def _assert_completed_once(batches: int = 12) -> None:
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    (trial,) = exp["trials"]
    assert trial["total_batches"] == batches
    assert_closed_form_validations(trial)
    ws = closed_form(0.01, batches, 2, 8)
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)


def test_two_activates_at_once_start_one_runner(tmp_path):
    _paused_experiment(tmp_path)
    procs = [
        subprocess.Popen(
            [*CLI, "experiment", "activate", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [(p, *p.communicate(timeout=budget(180))) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [(p.returncode, out, err) for p, out, err in results]
    (winner,) = [p for p, _, _ in results if p.returncode == 0]
    (refused,) = [err for p, _, err in results if p.returncode == 2]
    assert refused.strip() == (
        f"det-lite: error: experiment 1 is already running in process {winner.pid}; "
        "pause or kill it first (det-lite experiment pause 1)"
    )
    assert _starts() == 1
    _assert_completed_once()


def test_activate_right_after_create_detach_is_refused(tmp_path):
    created = cli("experiment", "create", _slow_config(tmp_path), LINEAR, "--detach", check=True)
    runner_pid = int(re.search(r"process (\d+)", created.stdout).group(1))
    second = cli("experiment", "activate", "1")
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"experiment 1 is already running in process {runner_pid}" in second.stderr
    assert "Traceback" not in second.stderr
    deadline = time.monotonic() + budget(120)
    while describe(1)["state"] == "ACTIVE" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _starts() == 1
    _assert_completed_once()


def test_activate_waits_for_the_previous_run_to_exit(tmp_path):
    _paused_experiment(tmp_path)
    holder = _hold_lock(3.0)
    try:
        start = time.monotonic()
        activated = cli("experiment", "activate", "1")
        elapsed = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    assert activated.returncode == 0, activated.stdout + activated.stderr
    waiting = f"Waiting for the previous run of experiment 1 (process {holder.pid}) to exit (at most 60 s)..."
    lines = activated.stdout.splitlines()
    assert lines[:2] == [waiting, "Activating experiment 1"]
    assert elapsed >= 2.5  # it started only once the holder had gone
    _assert_completed_once()


def test_activate_gives_up_when_the_previous_run_does_not_exit(tmp_path, monkeypatch):
    _paused_experiment(tmp_path)
    monkeypatch.setenv("DET_LITE_ACTIVATE_WAIT", "1")
    holder = _hold_lock(60.0)
    try:
        refused = cli("experiment", "activate", "1", timeout=30)
    finally:
        holder.kill()
        holder.wait()
    lock = os.path.join(os.environ["DET_LITE_HOME"], "experiments", "1", "runner.lock")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"det-lite: error: experiment 1: its previous run has not exited after 1 s (process(es) {holder.pid} "
        f"still hold {lock}); stop them, or wait longer with DET_LITE_ACTIVATE_WAIT=SECONDS\n"
    )
    assert describe(1)["state"] == "PAUSED" and describe(1)["trials"] == []


def test_activate_right_after_sigkill_of_the_runner(tmp_path):
    """The runner is SIGKILLed; its worker, which inherited the lock, stops within a second or
    so. An immediate `activate` (no pause in between) waits for it if needed, then resumes
    exactly: one more start of the trial, the uninterrupted run's numbers."""
    proc = subprocess.Popen(
        [*CLI, "experiment", "create", _slow_config(tmp_path, batches=24), LINEAR],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    store = Store()
    deadline = time.monotonic() + budget(90)
    while time.monotonic() < deadline:
        trials = store.trials.list(1) if store.experiments.get(1) else []
        if trials and trials[0]["total_batches"] >= 6:
            break
        time.sleep(0.1)
    assert psutil.Process(proc.pid).children(recursive=True)  # the worker, holding the lock too
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    activated = cli("experiment", "activate", "1")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    assert _starts() == 2
    _assert_completed_once(batches=24)
