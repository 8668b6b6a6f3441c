"""``core_context.searcher``: the legacy operations of Determined's searcher API.

det-lite's searchers run a trial once per length they ask of it (an ASHA rung, the whole
``max_length`` for single, grid and random): ``operations()`` yields an operation whose
``length`` is that target, in the unit of ``searcher.max_length``. The script trains to it and
reports the searcher metric with ``op.report_completed``; then the chief asks the runner for
the next operation (``runtime/_next_op.py``, when the searcher may want more): an ASHA promotion
decided at once is the next operation, in this process; otherwise ``operations()`` ends, and
the runner resumes the trial from its latest checkpoint when the searcher asks for more.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Iterator, Optional

from determined_lite.core._calls import note_call

logger = logging.getLogger("determined_lite")


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHEIF_ONLY"  # Determined's spelling


class SearcherOperation:
    """One train-validate-report cycle to ``length`` (absolute, in the searcher's unit)."""

    def __init__(self, length: int, is_chief: bool, trial: Any = None) -> None:
        self._length = length
        self._is_chief = is_chief
        self._trial = trial
        self._completed = False
        self._metric: Optional[float] = None

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        """Progress towards ``length`` (chief only; the runner's bar follows reported metrics)."""
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_progress() from the chief worker")
        if self._completed and length != self._length:
            raise RuntimeError("you must not call op.report_progress() after op.report_completed()")
        note_call(self._trial, f"op.report_progress({length})")
        logger.debug("op.report_progress(%s)", length)

    def report_completed(self, searcher_metric: Any) -> None:
        """The searcher metric at ``length`` (chief only, once)."""
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_completed() from the chief worker")
        if self._completed:
            raise RuntimeError("you may only call op.report_completed() once")
        self._completed = True
        self._metric = float(searcher_metric)
        note_call(self._trial, f"op.report_completed({searcher_metric})")
        logger.info("op.report_completed(%s) at length %s", searcher_metric, self._length)
        if self._trial is not None:
            self._trial.searcher_metric = float(searcher_metric)


class SearcherContext:
    """``core_context.searcher``: the length this run of the trial trains to."""

    def __init__(self, distributed: Any, length: int, units: Optional[Unit], trial: Any = None) -> None:
        self._dist = distributed
        self._length = length
        self._units = units
        self._trial = trial

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """One operation to the searcher's length (every rank gets it from the chief)."""
        mode = SearcherMode(searcher_mode)
        collective = mode == SearcherMode.WorkersAskChief
        note_call(self._trial, "core_context.searcher.operations()", every_rank=collective)
        if self._length == 0:
            raise RuntimeError(
                "searcher.operations() needs searcher.max_length in the experiment config; without "
                "it (Determined >= 0.38's form) train to a length of your own"
            )
        if self._dist.rank == 0:
            length: Optional[int] = self._length
            while length is not None:
                op = SearcherOperation(length, True, self._trial)
                if collective:
                    self._dist.broadcast(op.length)
                yield op
                if not op._completed:
                    raise RuntimeError("you must call op.report_completed() on each operation")
                length = self._next_length(op)
            if collective:
                self._dist.broadcast(None)
            return
        if mode != SearcherMode.WorkersAskChief:
            raise RuntimeError(
                "you cannot call searcher.operations(searcher_mode=ChiefOnly) from a non-chief worker"
            )
        while True:
            length = self._dist.broadcast(None)
            if length is None:
                return
            yield SearcherOperation(length, False, self._trial)

    def _next_length(self, op: SearcherOperation) -> Optional[int]:
        """The next operation's length when the runner promoted the trial at once (the trial
        asks it: ``ScriptTrial.next_length``), else None: no more operations in this run."""
        ask = getattr(self._trial, "next_length", None)
        return None if ask is None else ask(op._metric)

    def acknowledge_out_of_ops(self) -> None:
        """Nothing to acknowledge (as in Determined >= 0.38)."""

    def get_configured_units(self) -> Optional[Unit]:
        """The unit of ``searcher.max_length`` (None when it was a bare number)."""
        return self._units


def trial_operation(context: SearcherContext, length: int, is_chief: bool) -> SearcherOperation:
    """One operation to ``length`` for ``context``'s trial, outside ``operations()`` (the batch
    processor's single one); not part of Determined's ``SearcherContext``."""
    return SearcherOperation(length, is_chief, context._trial)
