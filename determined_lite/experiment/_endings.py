"""How an experiment runner ends: paused (resumable), or ended in a final state, with the
retention policy applied, the runner lock told first, and one final line after the summary."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Tuple

from determined_lite.experiment._exit import errored_note
from determined_lite.experiment._lock import RunnerLock, RunnerPhase
from determined_lite.experiment._progress import summary
from determined_lite.experiment._search import Search
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.store._states import ExperimentState, TrialState


class Endings:
    """The runner's ways to stop, and the summary and final line it leaves."""

    def __init__(
        self,
        store: Any,
        experiment_id: int,
        search: Search,
        logs: TrialLogs,
        lock: Optional[RunnerLock],
        varying: Sequence[Tuple[str, ...]],
    ) -> None:
        self.store, self.id, self.search, self.logs = store, experiment_id, search, logs
        self.lock = lock
        self.varying = varying
        self.final_line: Optional[str] = None  # how the run ended, printed after the summary

    def summary(self, width: Optional[int] = None) -> str:
        """The trials best first by the searcher metric, their best checkpoints, the best trial
        (fitted to ``width``: a terminal's)."""
        settings = self.search.settings
        return summary(
            self.store.experiments.describe(self.id, metrics=False),  # the metrics are not shown
            metric=settings.metric,
            smaller_is_better=settings.smaller_is_better,
            varying=self.varying,
            stopped_early={r.trial_id for r in self.search.requests.values() if r.stopped_early},
            width=width,
        )

    def _stopping(self) -> None:
        """Tell contenders for the lock that this runner is exiting (before the state says so)."""
        if self.lock is not None:
            self.lock.record(os.getpid(), RunnerPhase.STOPPING)

    def mark_paused(self, why: str) -> None:
        """PAUSED, its unfinished trials too: ``activate`` resumes it."""
        self._stopping()
        for request in self.search.unfinished():
            self.store.trials.update(request.trial_id, state=TrialState.PAUSED)
        self.search.apply_retention()
        self.store.experiments.set_state(self.id, ExperimentState.PAUSED)
        self._final(f"experiment {self.id} {why}; resume with: det-lite experiment activate {self.id}")

    def end(self, state: ExperimentState, trial_state: TrialState, note: str = "") -> None:
        """The final ``state``; unfinished trials end in ``trial_state``."""
        self._stopping()
        for request in list(self.search.unfinished()):
            request.finished = True
            self.store.trials.update(request.trial_id, state=trial_state)
        self.search.apply_retention()
        self.store.experiments.set_state(self.id, state)
        self.search.save()
        self._final(f"experiment {self.id} {state}{note}")

    def complete(self) -> int:
        """The search is over: COMPLETED when a trial completed (exit 0), else ERROR (exit 1)."""
        trials = self.store.trials.list(self.id)
        ok = any(t["state"] == TrialState.COMPLETED for t in trials)
        settings = self.search.settings
        note = errored_note(trials, settings.metric, settings.smaller_is_better) if ok else ""
        state = ExperimentState.COMPLETED if ok else ExperimentState.ERROR
        self.end(state, trial_state=TrialState.COMPLETED, note=note)
        return 0 if ok else 1

    def _final(self, text: str) -> None:
        """How the run ended: into the experiment's logs now, after the summary, and on the
        terminal once, after the summary (``final_line``)."""
        self.final_line = text
        # The summary a foreground run prints, also for `experiment logs -f` of a detached one.
        for line in self.summary().splitlines():
            self.logs.log(None, line, echo=False)
        self.logs.log(None, text, echo=False)
