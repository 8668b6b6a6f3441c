"""The runner's loop wakes on events (experiment/_wakeup.py): a trial run's end is noticed, and
the next trial started, without waiting for the loop's fallback period."""

from __future__ import annotations

import io
import os
import threading
import time
from typing import List

import pytest

from determined_lite.experiment import _runner, _wakeup
from determined_lite.experiment._create import create_experiment
from determined_lite.launch import _forkserver
from determined_lite.store import Store
from tests.cli_helpers import REPO, write_config
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
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02, 0.03]},
            "searcher.name": "grid",
            "searcher.max_concurrent_trials": 1,
        },
    )
    start = time.monotonic()
    code = create_experiment(config, LINEAR, out=io.StringIO())
    elapsed = time.monotonic() - start
    assert code == 0
    trials = Store().list_trials(1)
    assert [t["state"] for t in trials] == ["COMPLETED"] * 3
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.02, 0.03]
    assert waits and all(waits), waits  # each wait ended by an event, never by its timeout
    assert elapsed < fallback
