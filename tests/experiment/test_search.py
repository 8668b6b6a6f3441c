"""The runner's search (experiment/_search.py) and its endings (experiment/_endings.py), with a
real store and real searchers, without processes: operations become requests and a queue,
``Close`` stops a running trial's run, what would start trials is held while pausing, the state
saved resumes the search exactly; a pause and an end leave the states and final line they say."""

from __future__ import annotations

from typing import Any, Dict, List

from determined_lite.config import ExperimentSettings, SearcherSettings
from determined_lite.experiment._endings import Endings
from determined_lite.experiment._search import Search
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.searcher import Close, ValidateAfter, validate_config
from determined_lite.store import ExperimentState, Store, TrialState


class FakeRuns:
    """The runs in flight as the search sees them (``RunsView``)."""

    def __init__(self) -> None:
        self.running: List[str] = []
        self.closed: List[str] = []

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.running

    def close(self, request_id: str) -> None:
        self.closed.append(request_id)


def _config(**searcher: Any) -> Dict[str, Any]:
    raw = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 4, "lr": {"type": "categorical", "vals": [0.1, 0.2]}},
        "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 8}, **searcher},
    }
    return validate_config(raw).to_dict()


def _search(store: Store, config: Dict[str, Any], test_mode: bool = False) -> Search:
    experiment_id = store.experiments.create(config, None, None)
    settings = ExperimentSettings.from_config(config)
    search = Search(
        store, experiment_id, config, settings, SearcherSettings.from_config(config["searcher"]), test_mode
    )
    search.watch(FakeRuns())
    return search


def test_the_searchers_first_operations_become_trials_queued_to_their_length():
    store = Store()
    search = _search(store, _config())
    search.begin(resume=False)
    assert [(r.trial_id, r.hparams["lr"], r.pending) for r in search.requests.values()] == [
        (1, 0.1, 8),
        (2, 0.2, 8),
    ]
    assert search.queue == list(search.requests) and not search.shutdown
    assert [t["state"] for t in store.trials.list(search.id)] == ["ACTIVE", "ACTIVE"]
    saved = store.experiments.load_searcher_state(search.id)
    assert saved is not None and saved["queue"] == search.queue


def test_close_stops_a_running_trials_run_and_completes_it_stopped_early():
    store = Store()
    search = _search(store, _config())
    runs = FakeRuns()
    search.watch(runs)
    search.begin(resume=False)
    first, second = list(search.requests)
    runs.running.append(first)
    search.queue.remove(first)
    search.apply([ValidateAfter(first, 8)])  # running: not queued twice
    assert search.queue == [second]
    search.requests[first].trained = 4
    search.apply([Close(first), Close(second)])
    assert runs.closed == [first, second] and search.queue == []
    assert [(r.finished, r.stopped_early) for r in search.requests.values()] == [(True, True), (True, True)]
    assert [t["state"] for t in store.trials.list(search.id)] == ["COMPLETED", "COMPLETED"]


def test_what_would_start_trials_is_held_while_pausing_and_released_after():
    store = Store()
    search = _search(store, _config())
    search.pausing = True
    search.begin(resume=False)
    assert search.requests == {} and search.queue == [] and len(search.held) == 4  # 2 creates, 2 lengths
    search.pausing = False
    search.release_held()
    assert search.held == [] and len(search.queue) == 2
    assert [t["hparams"]["lr"] for t in store.trials.list(search.id)] == [0.1, 0.2]


def test_the_saved_state_resumes_the_search_where_it_stood():
    store = Store()
    search = _search(store, _config())
    search.begin(resume=False)
    first, second = list(search.requests)
    search.queue.remove(first)  # it ran to 8 and reported
    search.requests[first].trained, search.requests[first].pending = 8, None
    search.report(search.requests[first], 0.25, 8)
    again = Search(
        store,
        search.id,
        _config(),
        ExperimentSettings.from_config(_config()),
        search.settings,
        test_mode=False,
    )
    again.watch(FakeRuns())
    again.begin(resume=True)
    assert again.queue == [second] and list(again.requests) == [first, second]
    assert again.requests[first].finished and again.requests[first].trained == 8
    assert [t["state"] for t in store.trials.list(search.id)] == ["COMPLETED", "ACTIVE"]


def test_endings_pause_then_complete_with_the_final_line_after_the_summary():
    store = Store()
    search = _search(store, _config())
    search.begin(resume=False)
    logs = TrialLogs(store, search.id, progress=_NoProgress(), echo=False)
    endings = Endings(store, search.id, search, logs, lock=None, varying=[("lr",)])
    endings.mark_paused("paused")
    assert (
        endings.final_line
        == f"experiment {search.id} paused; resume with: det-lite experiment activate {search.id}"
    )
    assert store.experiments.get(search.id)["state"] == ExperimentState.PAUSED
    assert [t["state"] for t in store.trials.list(search.id)] == ["PAUSED", "PAUSED"]
    first = search.requests[next(iter(search.requests))]
    search.finish(first, TrialState.COMPLETED)
    assert endings.complete() == 0
    assert endings.final_line == f"experiment {search.id} COMPLETED"
    assert [t["state"] for t in store.trials.list(search.id)] == ["COMPLETED", "COMPLETED"]
    logs.flush()
    lines = [line["line"] for line in store.logs.list(experiment_id=search.id)]
    summary = endings.summary().splitlines()
    assert summary[0].split() == ["trial", "state", "batches", "best", "loss", "checkpoint", "lr"]
    paused = f"experiment {search.id} paused; resume with: det-lite experiment activate {search.id}"
    assert paused in lines
    assert lines[-len(summary) - 1 :] == [*summary, f"experiment {search.id} COMPLETED"]


class _NoProgress:
    def write(self, line: str) -> None:
        raise AssertionError("not echoed")
