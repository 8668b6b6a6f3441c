"""The harness's own callbacks: metric logging and TensorBoard output (chief only)."""

from __future__ import annotations

import logging
import numbers
from typing import Any, Callable, Dict, List, Optional

from determined_lite._terminal import format_number
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._schedule import TrainingState

logger = logging.getLogger("determined_lite")


def _scalars(metrics: Dict[str, Any]) -> Dict[str, float]:
    return {
        k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)
    }


def _fmt(metrics: Dict[str, Any]) -> str:
    """``loss=0.04135 accuracy=0.975``: scalars, 4 significant digits (full values are in the store)."""
    return " ".join(f"{k}={format_number(v)}" for k, v in _scalars(metrics).items())


class MetricLogger(PyTorchCallback):
    """One line per report of reduced training and validation metrics (chief only):
    ``batch 23 validation: loss=0.1123 accuracy=0.975``. Logged (``determined_lite`` logger,
    INFO), or given to ``printer`` (a plain-Python run's display)."""

    def __init__(
        self, is_chief: bool, state: TrainingState, printer: Optional[Callable[[str], None]] = None
    ) -> None:
        self._enabled = is_chief
        self._state = state
        self._printer = printer

    def _say(self, kind: str, metrics: Dict[str, Any]) -> None:
        if not self._enabled:
            return
        line = f"batch {self._state.batches_done} {kind}: {_fmt(metrics)}"
        if self._printer is not None:
            self._printer(line)
        else:
            logger.info("%s", line)

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self._say("training", avg_metrics)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._say("validation", metrics)


class MetricScalars:
    """A trial's reported scalar metrics as TensorBoard scalars (``training/<name>``,
    ``validation/<name>`` at the batch count), and its hyperparameters for the HParams plugin
    (one row per trial directory; ``TorchWriter.add_hparams_session``; none for ``hparams``
    None). The one writer of class trials (``TensorBoardMetrics``), Core API scripts
    (``core.TrainContext``) and the ready-made callbacks (``callbacks/_scalars.py``)."""

    def __init__(self, path: str, hparams: Optional[Dict[str, Any]] = None) -> None:
        self._path = path
        self._hparams = None if hparams is None else dict(hparams)
        self._writer: Any = None

    def write(self, prefix: str, step: int, metrics: Dict[str, Any]) -> None:
        self.write_tags({f"{prefix}/{name}": value for name, value in _scalars(metrics).items()}, step)

    def write_tags(self, scalars: Dict[str, float], step: int) -> None:
        """``scalars`` by their full tags, at ``step``."""
        if self._writer is None:
            from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter

            self._writer = TorchWriter(self._path)
            if self._hparams is not None:
                self._writer.add_hparams_session(self._hparams)
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class TensorBoardMetrics(PyTorchCallback):
    """Writes every reported scalar metric of a class trial to TensorBoard (chief only)."""

    def __init__(
        self,
        path: Optional[str],
        is_chief: bool,
        state: TrainingState,
        hparams: Dict[str, Any],
    ) -> None:
        self._state = state
        self._scalars = MetricScalars(path, hparams) if is_chief and path is not None else None

    def _write(self, prefix: str, metrics: Dict[str, Any]) -> None:
        if self._scalars is not None:
            self._scalars.write(prefix, self._state.batches_done, metrics)

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self._write("training", avg_metrics)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._write("validation", metrics)

    def on_trial_shutdown(self) -> None:
        if self._scalars is not None:
            self._scalars.close()
