"""The search an experiment runner drives: the searcher, its requests (one a trial), the queue
of requests to run, the operations held while pausing, and their state in the store, saved after
every change so ``activate`` resumes exactly where it stood.

The trial runs in flight (``_runs.Runs``) are seen through :class:`RunsView`: a ``Close`` stops
its trial's run at once. A finished trial's state and the retention policy go to the store here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence

from determined_lite.config import ExperimentSettings, SearcherSettings
from determined_lite.experiment._requests import SearchState, TrialRequest, trial_seed
from determined_lite.reporting._retention import RetentionPolicy, apply_retention
from determined_lite.searcher import (
    Close,
    Create,
    Operation,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    make_searcher,
)
from determined_lite.store._db import dumps_json
from determined_lite.store._states import TrialState


class RunsView(Protocol):
    """What the search sees of the trial runs in flight (by request id)."""

    def __contains__(self, request_id: object) -> bool: ...

    def close(self, request_id: str) -> None:
        """Stop the request's run, unless its metric went to the searcher as it ran."""


class Search:
    """One experiment's search (see the module's docstring); :meth:`watch` the runs before use."""

    def __init__(
        self,
        store: Any,
        experiment_id: int,
        config: Mapping[str, Any],
        settings: ExperimentSettings,
        searcher_settings: SearcherSettings,
        test_mode: bool,
    ) -> None:
        self.store, self.id, self.test_mode = store, experiment_id, test_mode
        self.space, self.seed = config["hyperparameters"], settings.experiment_seed
        self.settings = searcher_settings
        self.retention = RetentionPolicy.from_config(
            config, searcher_settings.metric, searcher_settings.smaller_is_better, experiment_id
        )
        self.searcher = self._make(single=test_mode)
        self.requests: Dict[str, TrialRequest] = {}
        self.queue: List[str] = []  # request ids to run, first first
        self.shutdown = False  # the searcher has no more work
        self.pausing = False  # a pause was requested: trials stop at a checkpoint, none start
        self.held: List[Operation] = []  # operations that would start trials, held while pausing
        self._saved: Optional[str] = None  # the state last stored, as JSON
        self._runs: RunsView

    def watch(self, runs: RunsView) -> None:
        """The runs this search's ``Close`` stops and its ``ValidateAfter`` does not queue again."""
        self._runs = runs

    def _make(self, single: bool) -> SearchMethod:
        """The config's searcher; ``single``: one trial of its space (--test, as Determined's)."""
        settings = dataclasses.replace(self.settings, name="single") if single else self.settings
        return make_searcher(settings, self.space, self.seed)

    # --- state ------------------------------------------------------------------------------
    def begin(self, resume: bool) -> None:
        """The searcher's first operations, or (``resume``) the stored state, its unfinished
        trials ACTIVE again."""
        if not (resume and self._load()):
            self.apply(self.searcher.initial_operations())
            return
        for request in self.unfinished():
            self.store.trials.update(request.trial_id, state=TrialState.ACTIVE)

    def _load(self) -> bool:
        saved = self.store.experiments.load_searcher_state(self.id)
        if saved and saved["searcher"].get("searcher") != self.searcher.name:  # a --test run's
            self.searcher = self._make(single=True)
        state = SearchState.load(saved, self.searcher)
        if state is None:
            return False
        self.requests, self.queue = state.requests, state.queue
        self.shutdown, self.held = state.shutdown, state.held
        return True

    def save(self) -> None:
        """Store the search's state (each change calls this; an unchanged state is not written)."""
        state = SearchState(self.requests, self.queue, self.shutdown, self.held).to_json(self.searcher)
        if (text := dumps_json(state, "searcher state")) != self._saved:
            self.store.experiments.save_searcher_state(self.id, state)
            self._saved = text

    def unfinished(self) -> Iterator[TrialRequest]:
        return (r for r in self.requests.values() if not r.finished)

    # --- searcher operations ----------------------------------------------------------------
    def apply(self, operations: Sequence[Operation]) -> None:
        """Carry out the searcher's operations (those that would start trials are held while
        pausing), then save."""
        for op in operations:
            if self._hold(op):
                continue
            if isinstance(op, Create):
                seed = trial_seed(self.seed, op.request_id)
                trial_id = self.store.trials.create(self.id, op.request_id, op.hparams, seed)
                self.requests[op.request_id] = TrialRequest(op.request_id, trial_id, op.hparams, seed)
            elif isinstance(op, ValidateAfter):
                self.requests[op.request_id].pending = op.length
                if op.request_id not in self.queue and op.request_id not in self._runs:
                    self.queue.append(op.request_id)
            elif isinstance(op, Close):
                self._close(self.requests[op.request_id])
            elif isinstance(op, Shutdown):
                self.shutdown = True
            else:
                raise TypeError(f"unknown searcher operation {op!r}")
        self.save()

    def _close(self, request: TrialRequest) -> None:
        request.closed, request.pending = True, None
        if request.request_id in self.queue:
            self.queue.remove(request.request_id)
        self._runs.close(request.request_id)  # (a run that reported ends by itself)
        if not request.finished:
            request.stopped_early = not self.test_mode and request.trained < self.settings.max_length
            self.finish(request, TrialState.COMPLETED)

    def _hold(self, op: Operation) -> bool:
        """While pausing, keep a new trial (and what the searcher asks of it) for activation."""
        held_ids = {h.request_id for h in self.held if isinstance(h, Create)}
        if not (self.pausing and (isinstance(op, Create) or getattr(op, "request_id", None) in held_ids)):
            return False
        self.held.append(op)
        return True

    def release_held(self) -> None:
        operations, self.held = self.held, []
        if operations:
            self.apply(operations)

    # --- a trial's events -------------------------------------------------------------------
    def report(self, request: TrialRequest, metric: float, length: int) -> None:
        """The trial's searcher metric at ``length``, to the searcher."""
        self.apply(self.searcher.on_validation_completed(request.request_id, metric, length))

    def requeue(self, request: TrialRequest) -> None:
        """Run the trial again first (from its latest checkpoint) when trials start again."""
        self.queue.insert(0, request.request_id)
        self.save()

    def exit_early(self, request: TrialRequest, reason: str, state: TrialState) -> None:
        """The trial ends in ``state`` before its length; the searcher is told why."""
        request.pending, request.closed = None, True
        self.finish(request, state)
        self.apply(self.searcher.on_trial_exited_early(request.request_id, reason))

    def finish(self, request: TrialRequest, state: TrialState) -> None:
        request.finished = True
        self.store.trials.update(request.trial_id, state=state, stopped_early=request.stopped_early)
        self.apply_retention()

    def apply_retention(self) -> None:
        """The whole experiment's policy (each chief applies it to its trial as it registers)."""
        apply_retention(self.store, self.id, self.retention, [r.trial_id for r in self.unfinished()])
