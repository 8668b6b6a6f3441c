"""``core_context.preempt``: whether the script should checkpoint and exit now.

True after ``det-lite experiment pause`` or ``kill`` (the chief asks the store, at most every
``POLL_S`` seconds; in ``WorkersAskChief`` mode every rank gets the chief's answer, so every rank
must call it), and when the trial reached the length its searcher asked for through its
``searcher.time_metric`` (the run ends there; the runner resumes it for the next rung).
Outside det-lite it is always False.
"""

from __future__ import annotations

import enum
import time
from typing import Any, Optional

from determined_lite.core._calls import note_call

POLL_S = 0.5


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    """``core_context.preempt``."""

    def __init__(
        self, distributed: Any, mode: PreemptMode = PreemptMode.WorkersAskChief, trial: Any = None
    ) -> None:
        self._dist = distributed
        self._mode = PreemptMode(mode)
        self._trial = trial
        self._asked_at: Optional[float] = None
        self._answer = False

    def start(self) -> "PreemptContext":
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> "PreemptContext":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _chief_answer(self) -> bool:
        trial = self._trial
        if trial is None or self._answer:
            return self._answer
        if trial.reached_target():
            self._answer = True
            return True
        now = time.monotonic()
        if self._asked_at is None or now - self._asked_at >= POLL_S:
            self._asked_at = now
            if trial.stop_requested():
                trial.stopped = True
                self._answer = True
        return self._answer

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """Whether to checkpoint and exit now."""
        collective = self._mode == PreemptMode.WorkersAskChief and self._dist.size > 1
        note_call(self._trial, "core_context.preempt.should_preempt()", every_rank=collective)
        if collective:
            answer = self._chief_answer() if self._dist.rank == 0 else None
            return bool(self._dist.broadcast(answer))
        if self._mode == PreemptMode.ChiefOnly and self._dist.rank != 0:
            raise RuntimeError("should_preempt() in ChiefOnly mode may only be called on the chief")
        return self._chief_answer()  # WorkersAskMaster: every rank asks the store itself

    def acknowledge_preemption_signal(self) -> None:
        """Nothing to acknowledge: det-lite's runner waits for the trial to exit."""
