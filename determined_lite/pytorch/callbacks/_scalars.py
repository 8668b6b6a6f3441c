"""Scalars a ready-made callback writes to the trial's TensorBoard directory (chief only)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from determined_lite.pytorch._reporting import MetricScalars


class ScalarWriter:
    """A ``MetricScalars`` (no hyperparameters) on the chief only, when the trial has a
    TensorBoard directory; elsewhere ``write`` does nothing."""

    def __init__(self) -> None:
        self._scalars: Optional[MetricScalars] = None

    def bind(self, context: Any) -> None:
        path = str(context.get_tensorboard_path() or "")
        self._scalars = MetricScalars(path) if path and context.distributed.is_chief else None

    def write(self, scalars: Dict[str, float], step: int) -> None:
        if self._scalars is not None:
            self._scalars.write_tags(scalars, step)

    def close(self) -> None:
        if self._scalars is not None:
            self._scalars.close()
