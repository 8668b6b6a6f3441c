"""ModelSummary: parameter counts of every wrapped model when training starts."""

from __future__ import annotations

import dataclasses
from typing import Any, List

import torch

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._harness import unwrap


@dataclasses.dataclass(frozen=True)
class ModelStats:
    """One wrapped model's parameters (each shared parameter counted once per model)."""

    index: int
    name: str
    total: int
    trainable: int
    size_bytes: int

    @property
    def frozen(self) -> int:
        return self.total - self.trainable


def model_stats(index: int, model: torch.nn.Module) -> ModelStats:
    params = list(unwrap(model).parameters())
    return ModelStats(
        index=index,
        name=type(unwrap(model)).__name__,
        total=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
        size_bytes=sum(p.numel() * p.element_size() for p in params),
    )


def _count(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


class ModelSummary(PyTorchCallback):
    """When training starts, says one line per wrapped model (chief only) where the run says
    things (a plain-Python run's stdout lines, else the log): its class, total, trainable and
    frozen parameters, and their size. ``summaries`` holds the numbers."""

    def __init__(self) -> None:
        self.summaries: List[ModelStats] = []
        self._context: Any = None

    def setup(self, context: PyTorchTrialContext) -> None:
        self._context = context

    def on_training_start(self) -> None:
        self.summaries = [model_stats(i, m) for i, m in enumerate(self._context.models)]
        if not self._context.distributed.is_chief:
            return
        for s in self.summaries:
            self._context.harness.say(
                f"model {s.index} ({s.name}): {_count(s.total)} parameters, {_count(s.trainable)} "
                f"trainable, {_count(s.frozen)} frozen, {s.size_bytes / 2**20:.2f} MB"
            )
