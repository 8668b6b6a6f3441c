"""How an experiment runner ends: paused (resumable), or ended in a final state, with the
retention policy applied, the runner lock told first and one final line (``_runner.py``'s
``ExperimentRunner`` is a ``RunnerEndings``)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

from determined_lite.config import SearcherSettings
from determined_lite.experiment._exit import errored_note
from determined_lite.experiment._lock import RunnerLock, RunnerPhase
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
    _log: Callable[..., None]

    def _save_state(self) -> None:
        raise NotImplementedError

    def summary(self, width: Optional[int] = None) -> str:
        raise NotImplementedError

    def _stopping(self) -> None:
        """Tell contenders for the lock that this runner is exiting (before the state says so)."""
        if self.lock is not None:
            self.lock.record(os.getpid(), RunnerPhase.STOPPING)

    def _mark_paused(self, why: str) -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                self.store.update_trial(request.trial_id, state=TrialState.PAUSED)
        self._apply_retention()
        self.store.set_experiment_state(self.id, ExperimentState.PAUSED)
        self._final(f"experiment {self.id} {why}; resume with: det-lite experiment activate {self.id}")

    def _end(self, state: ExperimentState, trial_state: TrialState, note: str = "") -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                request.finished = True
                self.store.update_trial(request.trial_id, state=trial_state)
        self._apply_retention()
        self.store.set_experiment_state(self.id, state)
        self._save_state()
        self._final(f"experiment {self.id} {state}{note}")

    def _complete(self) -> int:
        trials = self.store.list_trials(self.id)
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
