"""The chief's progress meter: batches done, throughput since the first batch, the latest
reported loss and validation metric, handed to a sink (the runner's progress file, or
``ProgressDisplay``: a plain-Python run's bar and metric lines in this process).

The bar's ``loss=`` is the latest training report's (the mean over its period, reduced over the
workers): the same number as the ``batch N training: loss=...`` line above the bar, never a
single batch's. The meter reads no batch's metrics, so it adds no device synchronisation per
batch; snapshots are taken at most every ``interval_s``, and at reports, validations and the end.
"""

from __future__ import annotations

import numbers
import os
import time
from typing import Any, Callable, Dict, Optional, TextIO

from determined_lite._progress import TrialProgress
from determined_lite._terminal import BarBoard, fit, format_duration, in_notebook
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._schedule import TrainingState

Sink = Callable[[TrialProgress], None]
DEFAULT_INTERVAL_S = 0.5
LOSS = "loss"


def _scalar(value: Any) -> Optional[float]:
    if hasattr(value, "numel") and value.numel() == 1:
        value = value.item()
    elif hasattr(value, "size") and getattr(value, "size", 0) == 1 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _loss(metrics: Dict[str, Any]) -> Optional[float]:
    """``loss`` from a training report's metrics (``train_batch`` returning a tensor gives exactly
    that), else the first metric whose name has "loss" in it."""
    if LOSS in metrics:
        return _scalar(metrics[LOSS])
    for name, value in metrics.items():
        if LOSS in name.lower():
            return _scalar(value)
    return None


class ProgressMeter(PyTorchCallback):
    """Measures the run on the chief and calls ``sink`` with a :class:`TrialProgress`."""

    def __init__(
        self,
        sink: Sink,
        metric: Optional[str],
        *,
        state: Optional[TrainingState] = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink = sink
        self._state = state
        self._interval_s = interval_s
        self._clock = clock
        self._progress = TrialProgress(metric=metric)
        self._first: Optional[tuple] = None  # (batches, time) at the end of this run's first batch
        self._published = -float("inf")

    def bind(self, context: Any) -> None:
        """Read the loop's state from ``context`` (when it was not given at construction)."""
        self._state = context.harness.state

    def _training_state(self) -> TrainingState:
        if self._state is None:
            raise RuntimeError("ProgressMeter needs the loop's state: pass state= or call bind(context)")
        return self._state

    def _publish(self, force: bool = False, now: Optional[float] = None) -> None:
        now = self._clock() if now is None else now
        if not force and now - self._published < self._interval_s:
            return
        self._published = now
        self._sink(self._progress)

    def on_training_start(self) -> None:
        state = self._training_state()
        self._progress.total_batches = state.batches_done
        self._progress.max_batches = state.plan.max_batches if state.plan is not None else None
        self._first = None
        self._publish(force=True)

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        done, now = batch_idx + 1, self._clock()
        self._progress.total_batches = done
        if self._state is not None and self._state.plan is not None:  # longer after a promotion
            self._progress.max_batches = self._state.plan.max_batches
        if self._first is None:
            self._first = (done, now)
        elif now > self._first[1]:
            self._progress.batches_per_s = (done - self._first[0]) / (now - self._first[1])
        self._publish(now=now)

    def on_training_workload_end(self, avg_metrics: Dict[str, Any], batch_metrics: Any) -> None:
        """A training report: its loss (the period's mean) is the bar's from now on."""
        loss = _loss(avg_metrics)
        if loss is not None:
            self._progress.loss = loss
        self._publish(force=True)

    def on_validation_start(self) -> None:
        self._progress.validating = True
        self._publish(force=True)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._progress.validating = False
        if self._progress.metric is None:  # no searcher metric: the first number reported
            self._progress.metric = next((k for k, v in metrics.items() if _scalar(v) is not None), None)
        name = self._progress.metric
        if name is not None and name in metrics:
            self._progress.metric_value = _scalar(metrics[name])
        self._publish(force=True)

    def on_trial_shutdown(self) -> None:
        self._publish(force=True)


# --- Trainer.fit's own display (plain Python) ---------------------------------------------------

PROGRESS_ENV = "DET_LITE_PROGRESS"
LOCAL_INTERVAL_S = 0.2


def progress_by_default() -> bool:
    """Whether a plain-Python ``Trainer.fit`` shows its bar and metric lines when not told:
    yes, unless ``$DET_LITE_PROGRESS`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(PROGRESS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class ProgressDisplay:
    """A plain-Python run's bar and metric lines on ``out`` (stdout): the bar on a terminal or
    in a notebook, the lines everywhere."""

    def __init__(self, out: TextIO, label: str) -> None:
        isatty = getattr(out, "isatty", None)
        self.board = BarBoard(out, enabled=bool(isatty and isatty()) or in_notebook())
        self.label = label
        self._started = time.monotonic()
        self._progress: Optional[TrialProgress] = None
        self.board.update(label, self._line)

    def _line(self, width: int) -> str:
        elapsed = time.monotonic() - self._started
        if self._progress is None:
            return fit(f"{self.label}: starting [{format_duration(elapsed)}]", width)
        return self._progress.line(self.label, width, elapsed)

    def show(self, progress: TrialProgress) -> None:
        self._progress = TrialProgress.from_json(progress.to_json())
        self.board.refresh()

    def write(self, line: str) -> None:
        self.board.write(line)

    def close(self) -> None:
        """The bar's last state stays on the screen."""
        self.board.remove(self.label, keep=self._progress is not None)
        self.board.close()
