"""How an experiment runner ends: paused (resumable), or ended in a final state, with the
retention policy applied, the runner lock told first and one final line (``_runner.py``'s
``ExperimentRunner`` is a ``RunnerEndings``)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from determined_lite.config import SearcherSettings
from determined_lite.experiment._exit import errored_note
from determined_lite.experiment._gc import reconcile_experiment
from determined_lite.experiment._lock import RunnerLock, RunnerPhase
from determined_lite.experiment._progress import summary
from determined_lite.experiment._requests import TrialRequest
from determined_lite.reporting._retention import RetentionPolicy, apply_retention
from determined_lite.store._states import ExperimentState, TrialState


class RunnerEndings:
    """The runner's ways to stop; the attributes are the runner's (set in its ``__init__``)."""

    store: Any
    id: int
    lock: Optional[RunnerLock]
    requests: Dict[str, TrialRequest]
    retention: RetentionPolicy
    metric: str
    searcher_settings: SearcherSettings
    final_line: Optional[str]
    varying: Any
    _log: Callable[..., None]

    def _save_state(self) -> None:
        raise NotImplementedError

    def summary(self, width: Optional[int] = None) -> str:
        """The trials best first by the searcher metric, their best checkpoints, the best trial
        (fitted to ``width``: a terminal's)."""
        return summary(
            self.store.experiments.describe(self.id, metrics=False),  # the metrics are not shown
            metric=self.metric,
            smaller_is_better=self.searcher_settings.smaller_is_better,
            varying=self.varying,
            stopped_early={r.trial_id for r in self.requests.values() if r.stopped_early},
            width=width,
        )

    def _reconcile(self) -> None:
        """Register or remove what dead trial processes left in the checkpoint root (_gc.py)."""
        report = reconcile_experiment(self.store, self.id)
        for line in report.lines() + report.problems:
            self._log(None, line)

    def _stopping(self) -> None:
        """Tell contenders for the lock that this runner is exiting (before the state says so)."""
        if self.lock is not None:
            self.lock.record(os.getpid(), RunnerPhase.STOPPING)

    def _mark_paused(self, why: str) -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                self.store.trials.update(request.trial_id, state=TrialState.PAUSED)
        self._apply_retention()
        self.store.experiments.set_state(self.id, ExperimentState.PAUSED)
        self._final(f"experiment {self.id} {why}; resume with: det-lite experiment activate {self.id}")

    def _end(self, state: ExperimentState, trial_state: TrialState, note: str = "") -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                request.finished = True
                self.store.trials.update(request.trial_id, state=trial_state)
        self._apply_retention()
        self.store.experiments.set_state(self.id, state)
        self._save_state()
        self._final(f"experiment {self.id} {state}{note}")

    def _complete(self) -> int:
        trials = self.store.trials.list(self.id)
        ok = any(t["state"] == TrialState.COMPLETED for t in trials)
        note = errored_note(trials, self.metric, self.searcher_settings.smaller_is_better) if ok else ""
        state = ExperimentState.COMPLETED if ok else ExperimentState.ERROR
        self._end(state, trial_state=TrialState.COMPLETED, note=note)
        return 0 if ok else 1

    def _apply_retention(self) -> None:
        """The whole experiment's policy (each chief applies it to its trial as it registers)."""
        unfinished = [r.trial_id for r in self.requests.values() if not r.finished]
        apply_retention(self.store, self.id, self.retention, unfinished)

    def _final(self, text: str) -> None:
        """How the run ended: into the experiment's logs now, after the summary, and on the
        terminal once, after the summary (``final_line``)."""
        self.final_line = text
        # The summary a foreground run prints, also for `experiment logs -f` of a detached one.
        for line in self.summary().splitlines():
            self._log(None, line, echo=False)
        self._log(None, text, echo=False)
