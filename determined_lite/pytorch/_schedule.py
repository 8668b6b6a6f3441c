"""When the loop reports, validates, checkpoints and stops: a frozen plan and pure decisions.

Nothing here imports torch or touches a trial; the loop builds a :class:`Plan` once, asks
:func:`decide` after every batch and acts on the :class:`Decision`. The loop's progress lives
in :class:`TrainingState`, which the context and the harness's own callbacks read.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from determined_lite._errors import TrainingNotStartedError
from determined_lite.config import CheckpointPolicy, Record, TrainUnit
from determined_lite.config._settings import TEST_MODE_STEPS
from determined_lite.reporting._metric import is_better as is_better  # the loop's best-metric rule


def is_step_batch(batch_idx: int, aggregation_frequency: int) -> bool:
    """Whether batch ``batch_idx`` (from 0) ends an aggregation window, i.e. steps the optimizer."""
    return (batch_idx + 1) % aggregation_frequency == 0


@dataclasses.dataclass(frozen=True)
class Plan:
    """A trial's schedule in batches (periods ``None``: never)."""

    max_batches: int  # where training ends: max_length rounded up to whole optimizer steps
    requested_batches: int  # max_length as asked for
    aggregation_frequency: int
    epoch_length: int
    validation_every: Optional[int] = None
    checkpoint_every: Optional[int] = None
    report_every: Optional[int] = None
    checkpoint_policy: CheckpointPolicy = CheckpointPolicy.BEST

    @classmethod
    def build(
        cls,
        *,
        max_length: TrainUnit,
        epoch_length: int,
        aggregation_frequency: int,
        global_batch_size: Callable[[], int],
        validation_period: Optional[TrainUnit] = None,
        checkpoint_period: Optional[TrainUnit] = None,
        reporting_period: Optional[TrainUnit] = None,
        checkpoint_policy: CheckpointPolicy = CheckpointPolicy.BEST,
        test_mode: bool = False,
    ) -> "Plan":
        """Lengths in batches; ``global_batch_size()`` is asked only for lengths in records.

        ``test_mode``: ``TEST_MODE_STEPS`` optimizer steps, no periodic validation or checkpoint.
        """
        k = aggregation_frequency

        def batches(unit: TrainUnit) -> int:
            return unit.to_batches(epoch_length, global_batch_size() if isinstance(unit, Record) else 0)

        def every(unit: Optional[TrainUnit]) -> Optional[int]:
            return None if unit is None else max(1, batches(unit))

        requested = TEST_MODE_STEPS * k if test_mode else batches(max_length)
        return cls(
            max_batches=-(-requested // k) * k,
            requested_batches=requested,
            aggregation_frequency=k,
            epoch_length=epoch_length,
            validation_every=None if test_mode else every(validation_period),
            checkpoint_every=None if test_mode else every(checkpoint_period),
            report_every=every(reporting_period),
            checkpoint_policy=CheckpointPolicy(checkpoint_policy),
        )


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do once ``done`` batches are trained, before the outcome of a validation is known."""

    end: bool  # the last batch of training
    boundary: bool  # an optimizer step just completed: checkpoints and stops happen only here
    report: bool  # reduce and report the training metrics since the last report
    validate: bool
    checkpoint_pending: bool  # a checkpoint is owed at this or the next boundary

    def checkpoint_after_validation(self, policy: CheckpointPolicy, improved: bool) -> bool:
        """Whether a checkpoint is owed once this decision's validation ran (``improved``:
        the searcher metric improved)."""
        return self.checkpoint_pending or policy is CheckpointPolicy.ALL or (
            improved and policy is CheckpointPolicy.BEST
        )

    def checkpoint_now(self, checkpoint_pending: bool, stop: bool) -> bool:
        return self.boundary and (checkpoint_pending or self.end or stop)

    def stop_now(self, stop: bool) -> bool:
        return self.end or (stop and self.boundary)


def _due(done: int, every: Optional[int]) -> bool:
    return every is not None and done % every == 0


def quiet_until(plan: Plan, done: int) -> int:
    """The first batch count after ``done`` at which :func:`decide` can ask for anything while no
    checkpoint is pending and no stop is asked: the end, or a multiple of a period. The loop
    skips the decision on the batches before it (a decision there is all False)."""
    nearest = plan.max_batches if plan.max_batches > done else done + 1
    for every in (plan.validation_every, plan.checkpoint_every, plan.report_every):
        if every is not None:
            nearest = min(nearest, (done // every + 1) * every)
    return nearest


def decide(plan: Plan, done: int, *, checkpoint_pending: bool, stop: bool) -> Decision:
    """The end-of-batch decision once ``done`` batches are trained.

    ``checkpoint_pending``: a checkpoint was owed already (asked for off a boundary);
    ``stop``: the trial or an external request asked to stop (honoured at the next boundary,
    after a report and a checkpoint). A validation always happens at the end of training.
    """
    end = done >= plan.max_batches
    boundary = done % plan.aggregation_frequency == 0
    validate = end or _due(done, plan.validation_every)
    pending = checkpoint_pending or _due(done, plan.checkpoint_every)
    report = validate or (boundary and (pending or stop)) or _due(done, plan.report_every)
    return Decision(end=end, boundary=boundary, report=report, validate=validate, checkpoint_pending=pending)


@dataclasses.dataclass
class TrainingState:
    """The loop's progress on this worker: the loop writes it; the context and callbacks read it."""

    aggregation_frequency: int = 1
    batch_idx: Optional[int] = None  # the batch being trained (or last trained), from 0; None before
    batches_done: int = 0  # batches trained, counting those before a resume
    initial_batch: int = 0  # batches trained before this run (the checkpoint it resumes from)
    epoch_length: Optional[int] = None  # batches per epoch; known once training starts
    plan: Optional[Plan] = None
    best_validation: Optional[float] = None  # best searcher metric so far (carried in checkpoints)

    def current_batch(self) -> int:
        """``batch_idx``; before the first training batch, Determined's ``InternalException``."""
        if self.batch_idx is None:
            raise TrainingNotStartedError(
                "Training hasn't started: batch and epoch information is available from the first "
                "training batch on (in train_batch, and in training callbacks)"
            )
        return self.batch_idx

    def require_epoch_length(self) -> int:
        if self.epoch_length is None:
            raise TrainingNotStartedError(
                "Training hasn't started: epoch information is available once training started "
                "(inside train_batch or a training callback)"
            )
        return self.epoch_length

    @property
    def epoch(self) -> int:
        """The epoch of the batch being trained, from 0."""
        return self.current_batch() // self.require_epoch_length()

    def is_step_batch(self) -> bool:
        """Whether the batch being trained steps the optimizer."""
        return is_step_batch(self.current_batch(), self.aggregation_frequency)
