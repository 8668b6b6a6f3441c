"""The runner's loop wakes on events (experiment/_wakeup.py): a trial run's end is noticed, and
the next trial started, without waiting for the loop's fallback period."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import threading
import time
import types
from typing import Any, List

import pytest

from determined_lite.experiment import _next_ops, _requests, _runner, _wakeup
from determined_lite.experiment._create import create_experiment
from determined_lite.launch import _forkserver
from determined_lite.runtime import _next_op
from determined_lite.store import Store
from tests.cli_helpers import REPO, asha_overrides, write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")


def test_a_wake_up_ends_the_wait_at_once_and_none_is_lost():
    wakeup = _wakeup.Wakeup()
    try:
        assert wakeup.wait(0) is False  # nothing happened
        wakeup.wake()
        wakeup.wake()  # two events before the wait: one wait takes both
        assert wakeup.wait(0) is True
        assert wakeup.wait(0) is False
        timer = threading.Timer(0.05, wakeup.wake)
        timer.start()
        start = time.monotonic()
        assert wakeup.wait(600) is True  # woken from another thread, long before 600 s
        assert time.monotonic() - start < 300
        timer.join()
        for _ in range(100_000):  # more than the pipe holds: a full pipe is a pending wake-up
            wakeup.wake_from_signal()
        assert wakeup.wait(0) is True
        assert wakeup.wait(0) is False
    finally:
        wakeup.close()
    wakeup.wake()  # after close: nothing written, nothing raised
    wakeup.wake_from_signal()
    wakeup.close()


def _three_trials_one_at_a_time(tmp_path: Any) -> str:
    """The linear fixture's grid of three learning rates, one trial at a time."""
    return write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02, 0.03]},
            "searcher.name": "grid",
            "searcher.max_concurrent_trials": 1,
        },
    )


@pytest.fixture
def own_fork_server(monkeypatch):
    """The in-process runner's fork server, closed after the test."""
    monkeypatch.setattr(_forkserver, "_server", None)
    yield
    if _forkserver._server is not None:
        _forkserver._server.close()


@pytest.mark.timeout(480)
@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_each_trial_end_wakes_the_loop_before_its_fallback(
    tmp_path, monkeypatch, own_fork_server, forkserver
):
    """Three trials one at a time with a fallback period longer than the whole search: every
    wait of the loop ends by a wake-up (a run's end), none by its timeout, and the search takes
    less than one fallback period."""
    fallback = budget(150)
    monkeypatch.setattr(_runner, "POLL_S", fallback)
    monkeypatch.setenv("DET_LITE_FORKSERVER", forkserver)
    waits: List[bool] = []
    real_wait = _wakeup.Wakeup.wait

    def spy(self: _wakeup.Wakeup, timeout: float) -> bool:
        assert timeout == fallback
        woken = real_wait(self, timeout)
        waits.append(woken)
        return woken

    monkeypatch.setattr(_wakeup.Wakeup, "wait", spy)
    config = _three_trials_one_at_a_time(tmp_path)
    start = time.monotonic()
    code = create_experiment(config, LINEAR, out=io.StringIO())
    elapsed = time.monotonic() - start
    assert code == 0
    trials = Store().trials.list(1)
    assert [t["state"] for t in trials] == ["COMPLETED"] * 3
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.02, 0.03]
    assert waits and all(waits), waits  # each wait ended by an event, never by its timeout
    assert elapsed < fallback


def test_another_process_wakes_the_loop_through_its_fifo(tmp_path):
    """A chief on this machine announces its question with a byte to the runner's FIFO
    (``runtime/_next_op._announce``): the wait ends at once; the FIFO is the user's alone and
    goes with the loop; with no loop reading it, or a plain file at its path, nothing happens."""
    path = os.path.join(str(tmp_path), "wake.fifo")
    announce = [
        sys.executable,
        "-c",
        f"from determined_lite.runtime._next_op import _announce; _announce({path!r})",
    ]
    wakeup = _wakeup.Wakeup()
    wakeup.listen(path)
    try:
        assert stat.S_ISFIFO(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert wakeup.wait(0) is False
        proc = subprocess.Popen(announce)
        start = time.monotonic()
        assert wakeup.wait(600) is True  # woken by the other process, long before 600 s
        assert time.monotonic() - start < 300
        assert proc.wait(timeout=budget(60)) == 0
        assert wakeup.wait(0) is False  # its byte was taken: the writer's close is no event
    finally:
        wakeup.close()
    assert not os.path.exists(path)
    assert subprocess.run(announce, timeout=budget(60)).returncode == 0  # no reader: no error, no file
    assert not os.path.exists(path)
    with open(path, "w"):
        pass
    _next_op._announce(path)  # not a FIFO: left as it is
    assert os.path.getsize(path) == 0


@pytest.mark.timeout(480)
def test_a_question_wakes_the_loop_before_its_fallback(tmp_path, monkeypatch, own_fork_server):
    """ASHA trials one at a time, the loop's fallback and its question poll longer than the whole
    search: a run's question is still taken at once (its announcement wakes the loop), so a
    promotion decided then trains on in its process (a question not taken in 2 s is withdrawn)."""
    fallback = budget(150)
    monkeypatch.setattr(_runner, "POLL_S", fallback)
    monkeypatch.setattr(_next_ops, "QUESTION_POLL_S", fallback)
    monkeypatch.setenv("DET_LITE_NEXT_OP_WAIT", "2")
    changes = asha_overrides(min_validation_period=None)
    changes["searcher"] = {**changes["searcher"], "max_concurrent_trials": 1}
    config = write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, **changes)
    out = io.StringIO()
    start = time.monotonic()
    assert create_experiment(config, LINEAR, out=out) == 0
    assert time.monotonic() - start < fallback
    trials = Store().experiments.describe(1)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"] * 4
    # Trial 3's promotion is decided when it reports (trial 1's only once trial 2 reported).
    assert "trial 3 promoted at 2: train to 4 batches in its process" in out.getvalue()
    assert len(next(t for t in trials if t["id"] == 3)["runs"]) == 1


@pytest.mark.timeout(480)
def test_a_pass_of_the_loop_where_nothing_changed_encodes_no_state(tmp_path, monkeypatch, own_fork_server):
    """The search's state is encoded where it changes (a start, an end, a searcher operation),
    not on every pass of the loop: with the loop looking every 5 ms, three trials one at a time
    encode it a few times a trial, against hundreds of passes (800 here)."""
    monkeypatch.setattr(_runner, "POLL_S", 0.005)
    encoded, passes = [0], [0]
    real_to_json, real_wait = _requests.SearchState.to_json, _wakeup.Wakeup.wait

    def to_json(self: Any, searcher: Any) -> Any:
        encoded[0] += 1
        return real_to_json(self, searcher)

    def wait(self: _wakeup.Wakeup, timeout: float) -> bool:
        passes[0] += 1
        return real_wait(self, timeout)

    monkeypatch.setattr(_requests.SearchState, "to_json", to_json)
    monkeypatch.setattr(_wakeup.Wakeup, "wait", wait)
    config = _three_trials_one_at_a_time(tmp_path)
    assert create_experiment(config, LINEAR, out=io.StringIO()) == 0
    assert passes[0] >= 60, passes  # the runs take seconds: the loop passed many times
    assert encoded[0] <= 8 * 3, (encoded, passes)  # 11 here; each pass encoded it before


def test_where_no_fifo_can_be_made_the_loop_polls_for_questions(tmp_path):
    """A run directory without FIFOs: ``listen`` says so, and the loop's wait while a run may
    ask is the question poll again, as for a chief on another machine."""
    wakeup = _wakeup.Wakeup()
    try:
        assert wakeup.listen(os.path.join(str(tmp_path), "missing", "wake.fifo")) is False
        spec = types.SimpleNamespace(ask_next_op=True, wake_path=os.path.join(str(tmp_path), "wake.fifo"))
        run = types.SimpleNamespace(spec=spec, reported=False)
        runs = [run]  # the runner's runs, iterated as Runs is
        assert _next_ops.wait_s(runs, wakeup, 0.5) == _next_ops.QUESTION_POLL_S
        assert wakeup.listen(spec.wake_path) is True
        assert _next_ops.wait_s(runs, wakeup, 0.5) == 0.5  # announced: no poll
        spec.wake_path = None  # a chief elsewhere
        assert _next_ops.wait_s(runs, wakeup, 0.5) == _next_ops.QUESTION_POLL_S
    finally:
        wakeup.close()
