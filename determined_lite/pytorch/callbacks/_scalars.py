"""Scalars a ready-made callback writes to the trial's TensorBoard directory (chief only)."""

from __future__ import annotations

from typing import Any, Dict, Optional


class ScalarWriter:
    """Opens a ``TorchWriter`` on first use, on the chief only, when the trial has a
    TensorBoard directory; elsewhere ``write`` does nothing."""

    def __init__(self) -> None:
        self._path: Optional[str] = None
        self._enabled = False
        self._writer: Any = None

    def bind(self, context: Any) -> None:
        path = context.get_tensorboard_path()
        self._path = None if path is None else str(path)
        self._enabled = bool(context.distributed.is_chief and self._path)

    def write(self, scalars: Dict[str, float], step: int) -> None:
        if not self._enabled:
            return
        if self._writer is None:
            from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter

            self._writer = TorchWriter(self._path)
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
