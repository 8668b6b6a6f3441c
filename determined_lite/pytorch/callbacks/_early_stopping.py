"""EarlyStopping: end training at the validation after which a metric stopped improving."""

from __future__ import annotations

import enum
import math
import numbers
from typing import Any, Dict, Optional

import numpy as np

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext


class Mode(str, enum.Enum):
    """Which direction is better for the watched metric."""

    MIN = "min"
    MAX = "max"


class EarlyStopping(PyTorchCallback):
    """Stop when ``metric`` has not improved for ``patience`` validations in a row.

    A validation improves when the metric is below the best so far by more than ``min_delta``
    (``mode="min"``) or above it by more than ``min_delta`` (``mode="max"``); NaN never does.
    The stop is asked for in ``on_validation_end`` (``context.set_stop_requested``), so training
    ends at the validated batch: no further batch is trained and the final checkpoint is the
    validated one. Every worker sees the same reduced metrics and decides alike. The chief says
    why it stopped where the run says things (a plain-Python run's stdout lines, else the log).
    The best value and the count survive a resume (``state_dict``).
    """

    def __init__(self, metric: str, patience: int = 3, mode: str = "min", min_delta: float = 0.0) -> None:
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"EarlyStopping(metric=...) must be a metric name, got {metric!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"EarlyStopping(patience=...) must be a positive integer, got {patience!r}")
        modes = tuple(m.value for m in Mode)
        if mode not in modes:
            raise ValueError(f"EarlyStopping(mode=...) must be one of {modes}, got {mode!r}")
        if (
            isinstance(min_delta, bool)
            or not isinstance(min_delta, numbers.Real)
            or not math.isfinite(min_delta)
            or min_delta < 0
        ):
            raise ValueError(f"EarlyStopping(min_delta=...) must be a finite number >= 0, got {min_delta!r}")
        self.metric: str = metric
        self.patience: int = patience
        self.mode: Mode = Mode(mode)
        self.min_delta: float = float(min_delta)
        self.best: Optional[float] = None
        self.wait: int = 0  # validations in a row without improvement
        self.stopped_at: Optional[int] = None  # the batch training stopped at
        self._context: Any = None

    def setup(self, context: PyTorchTrialContext) -> None:
        self._context = context

    def improves(self, value: float) -> bool:
        """Whether ``value`` beats the best so far by more than ``min_delta``."""
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode is Mode.MIN:
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        value = self._value(metrics)
        if self.improves(value):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait < self.patience:
            return
        self.stopped_at = self._context.harness.state.batches_done
        self._context.set_stop_requested(True)
        if self._context.distributed.is_chief:
            best = "no number (NaN only)" if self.best is None else f"{self.best:.4g}"
            self._context.harness.say(
                f"EarlyStopping: {self.metric} did not improve on {best} by more than "
                f"{self.min_delta:g} (mode {self.mode.value}) in the last {self.wait} "
                f"validation(s); stopping at batch {self.stopped_at}"
            )

    def _value(self, metrics: Dict[str, Any]) -> float:
        if self.metric not in metrics:
            raise ValueError(
                f"EarlyStopping watches {self.metric!r}, which is not among the validation metrics "
                f"{sorted(metrics)}"
            )
        value = metrics[self.metric]
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"EarlyStopping needs {self.metric!r} to be a number, got {value!r}")
        return float(value)

    def state_dict(self) -> Dict[str, Any]:
        return {"best": self.best, "wait": self.wait}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.best = state_dict["best"]
        self.wait = state_dict["wait"]
