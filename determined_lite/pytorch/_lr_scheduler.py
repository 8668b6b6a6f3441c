"""LRScheduler: a torch LR scheduler that the harness steps, saves and restores; LRStepper steps them."""

from __future__ import annotations

import enum
import warnings
from typing import Any, Callable, Dict, List, Optional

import torch

from determined_lite.pytorch._hooks import Hook, HookDispatcher


class LRScheduler:
    """Wraps a torch LR scheduler; the harness calls ``step()`` as ``step_mode`` says.

    Attribute access falls through to the wrapped scheduler, so ``get_last_lr()`` and friends
    work as usual.
    """

    class StepMode(enum.Enum):
        """When the harness calls ``scheduler.step()``.

        STEP_EVERY_OPTIMIZER_STEP counts real optimizer steps of the scheduler's optimizer (so
        it is right under gradient aggregation); STEP_EVERY_BATCH counts training batches;
        STEP_EVERY_EPOCH counts epochs; MANUAL_STEP leaves every call to the trial.
        """

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(
        self,
        scheduler: Any,
        step_mode: "LRScheduler.StepMode",
        frequency: int = 1,
    ) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(
                f"wrap_lr_scheduler(step_mode=...) must be an LRScheduler.StepMode, got {step_mode!r}"
            )
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(
                f"wrap_lr_scheduler(frequency=...) must be a positive integer, got {frequency!r}"
            )
        if (
            isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            and step_mode is not LRScheduler.StepMode.MANUAL_STEP
        ):
            raise ValueError(
                "ReduceLROnPlateau needs a metric to step, so it can only be wrapped with "
                f"step_mode=LRScheduler.StepMode.MANUAL_STEP (got {step_mode.name}); call "
                "scheduler.step(metric) yourself, e.g. from a callback's on_validation_end"
            )
        if not hasattr(scheduler, "step") or not hasattr(scheduler, "state_dict"):
            raise TypeError(
                "wrap_lr_scheduler(lr_scheduler=...) must be a torch LR scheduler, got "
                f"{type(scheduler).__name__}"
            )
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    @property
    def scheduler(self) -> Any:
        return self._scheduler

    @property
    def step_mode(self) -> "LRScheduler.StepMode":
        return self._step_mode

    @property
    def frequency(self) -> int:
        return self._frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> Any:
        return self._scheduler.get_last_lr()

    def state_dict(self) -> Dict[str, Any]:
        return self._scheduler.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_scheduler":
            raise AttributeError(name)
        return getattr(self._scheduler, name)

    def __repr__(self) -> str:
        return (
            f"LRScheduler({type(self._scheduler).__name__}, {self._step_mode.name}, "
            f"frequency={self._frequency})"
        )


class LRStepper:
    """Decides every automatic scheduler step: the one place that reads ``step_mode``.

    ``steps_of(optimizer)`` gives how many times the (wrapped) optimizer a scheduler is built
    on has stepped, or None when it is not a wrapped one. Hooks fire on ``callbacks``, which
    the caller passes because the loop installs them after the trial wrapped its schedulers.
    """

    def __init__(self, steps_of: Callable[[Any], Optional[int]]) -> None:
        self.schedulers: List[LRScheduler] = []
        self._steps_of = steps_of

    def add(self, scheduler: LRScheduler) -> None:
        self.schedulers.append(scheduler)

    def _with_mode(self, mode: "LRScheduler.StepMode") -> List[LRScheduler]:
        if not self.schedulers:  # asked after every optimizer step
            return self.schedulers
        return [s for s in self.schedulers if s.step_mode is mode]

    def after_optimizer_step(
        self, is_its_optimizer: Callable[[Any], bool], steps: int, callbacks: HookDispatcher
    ) -> None:
        """STEP_EVERY_OPTIMIZER_STEP: an optimizer stepped for the ``steps``-th time."""
        for sched in self._with_mode(LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP):
            if is_its_optimizer(sched.optimizer) and steps % sched.frequency == 0:
                self.step(sched, callbacks)

    def after_step_window(
        self, last_batch_idx: int, aggregation_frequency: int, callbacks: HookDispatcher
    ) -> None:
        """STEP_EVERY_BATCH, after the optimizer step that ends a window of k batches.

        The steps due on the window's k batches are taken after its optimizer step, as in
        Determined ("never step the LR when the optimizer does not step"): stepping mid-window
        would decay the LR before the window's step and skip the schedule's first values.
        """
        first = last_batch_idx - aggregation_frequency + 1
        for sched in self._with_mode(LRScheduler.StepMode.STEP_EVERY_BATCH):
            for i in range(first, last_batch_idx + 1):
                if (i + 1) % sched.frequency == 0:
                    self.step(sched, callbacks)

    def after_epoch(self, epochs_done: int, callbacks: HookDispatcher) -> None:
        """STEP_EVERY_EPOCH: ``epochs_done`` epochs are complete."""
        for sched in self._with_mode(LRScheduler.StepMode.STEP_EVERY_EPOCH):
            if epochs_done % sched.frequency == 0:
                self.step(sched, callbacks)

    def step(self, sched: LRScheduler, callbacks: HookDispatcher) -> None:
        callbacks.call(Hook.ON_BEFORE_SCHEDULER_STEP, sched)
        if self._steps_of(getattr(sched, "optimizer", None)) == 0:
            # STEP_EVERY_BATCH/EPOCH may legitimately step before the first optimizer step
            # (e.g. under gradient aggregation); torch's ordering warning is noise here.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
                sched.step()
        else:
            sched.step()
        callbacks.call(Hook.ON_AFTER_SCHEDULER_STEP, sched)
