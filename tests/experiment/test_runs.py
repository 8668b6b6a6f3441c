"""The runner's runs (experiment/_runs.py) with a real store and searcher and a fake launcher:
queued trials start while ``max_concurrent_trials`` allows, a run's exit becomes the search's
event (a metric, a restart up to ``max_restarts``, an early exit), and ``Trial.kill()`` stops
that trial alone."""

from __future__ import annotations

import io
import os
import types
from typing import Any, Dict, List, Optional

from determined_lite.config import ExperimentSettings
from determined_lite.experiment._progress import Progress
from determined_lite.experiment._runs import Runs
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.launch import WorkerResult, WorkerStatus
from determined_lite.store import Store
from tests.experiment.test_search import _config, _search


class FakeRun:
    """A trial run that ends when the test says so, with the result it is given."""

    def __init__(self, trial_id: int, length: int, result_dir: str) -> None:
        self.trial_id, self.length = trial_id, length
        self.code: Optional[int] = None
        self.result = lambda code: self.outcome
        self.outcome = WorkerResult(WorkerStatus.ERROR, error="not ended")
        self.stopped = False
        path = os.path.join(result_dir, f"result_{trial_id}_{length}.json")
        self.spec = types.SimpleNamespace(result_path=path, ask_next_op=False, wake_path=None)
        self.placement = types.SimpleNamespace(
            devices=(), to_json=lambda: {"host": "here", "slots": 1, "devices": []}
        )

    def end(self, outcome: WorkerResult, code: int) -> None:
        self.outcome, self.code = outcome, code

    def poll(self) -> Optional[int]:
        return self.code

    def wait(self) -> int:
        assert self.code is not None
        return self.code

    def stop(self) -> int:
        self.stopped, self.code = True, -15
        return -15


class FakeLauncher:
    def __init__(self, result_dir: str) -> None:
        self.result_dir = result_dir
        self.started: List[FakeRun] = []
        self.executor = types.SimpleNamespace(capacity=lambda: 8, total=lambda: 8)

    def start(self, trial_id: int, hparams: Any, seed: int, length: int, path: Any, **_: Any) -> FakeRun:
        run = FakeRun(trial_id, length, self.result_dir)
        self.started.append(run)
        return run

    def goal(self, length: int) -> str:
        return f"train to {length} batches"


def _runs(tmp_path: Any, **searcher: Any) -> Runs:
    store = Store()
    config = _config(**searcher)
    config["max_restarts"] = 1
    search = _search(store, config)
    progress = Progress(enabled=False, out=io.StringIO())
    logs = TrialLogs(store, search.id, progress, echo=False)
    launcher: Any = FakeLauncher(str(tmp_path))
    settings = ExperimentSettings.from_config(config)
    wakeup: Any = types.SimpleNamespace(wake=lambda: None)  # the fake runs end when told
    runs = Runs(store, search.id, search, launcher, settings, logs, progress, wakeup)
    search.begin(resume=False)
    return runs


def _lines(runs: Runs) -> List[str]:
    runs.logs.flush()
    return [line["line"] for line in runs.store.logs.list(experiment_id=runs.id)]


def _states(runs: Runs) -> Dict[int, str]:
    return {t["id"]: t["state"] for t in runs.store.trials.list(runs.id)}


def test_queued_trials_start_as_max_concurrent_trials_allows_and_report_their_metric(tmp_path):
    runs = _runs(tmp_path, max_concurrent_trials=1)
    runs.start_queued()
    first = runs.launcher.started[0]
    assert (len(runs), first.trial_id, first.length, len(runs.search.queue)) == (1, 1, 8, 1)
    assert _lines(runs) == ["trial 1 starts: train to 8 batches"]
    first.end(WorkerResult(WorkerStatus.COMPLETED, 8, validation_metrics={"loss": 0.5}), 0)
    runs.poll(pausing=False)
    runs.start_queued()  # its slot goes to the next trial
    assert [r.trial_id for r in runs.launcher.started] == [1, 2] and runs.search.queue == []
    assert _states(runs) == {1: "COMPLETED", 2: "ACTIVE"}
    trials = runs.store.experiments.describe(runs.id)["trials"]
    assert [[r["host"] for r in t["runs"]] for t in trials] == [["here"], ["here"]]


def test_a_failed_run_restarts_up_to_max_restarts_then_errors(tmp_path):
    runs = _runs(tmp_path, max_concurrent_trials=1)
    for _ in range(2):
        runs.start_queued()
        runs.launcher.started[-1].end(WorkerResult(WorkerStatus.ERROR, error="boom"), 1)
        runs.poll(pausing=False)
    assert [r.trial_id for r in runs.launcher.started] == [1, 1]
    assert _states(runs)[1] == "ERROR" and runs.search.requests[runs.search.queue[0]].trial_id == 2
    assert _lines(runs)[1:4] == [
        "trial 1 failed: boom",
        "restarting trial 1 from the start (1/1)",
        "trial 1 starts: train to 8 batches",
    ]
    assert _lines(runs)[-1] == "trial 1 failed: boom"


def test_a_trial_kill_stops_that_trial_alone_and_the_search_goes_on(tmp_path):
    runs = _runs(tmp_path)
    runs.start_queued()
    killed, other = runs.launcher.started
    runs.kill_trials([killed.trial_id])
    assert killed.stopped and not other.stopped
    assert [run.request.trial_id for run in runs] == [other.trial_id]
    assert _states(runs) == {1: "CANCELED", 2: "ACTIVE"}
    assert "trial 1 killed; the search goes on" in _lines(runs)
