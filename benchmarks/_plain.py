"""The hand-written side of the benchmarks: models, data, optimizer and the plain loop.

Nothing here imports det-lite, so a process that runs only :class:`PlainLoop` (the memory
measure's baseline) holds what a user's own loop holds and nothing more. ``_trials`` builds
det-lite's side from the same functions.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import torch
import torch.nn.functional as F

SEED = 1234
LR, MOMENTUM = 0.01, 0.9

# kind -> (records, global batch)
DATA = {"mlp": (4096, 64), "cnn": (1024, 32)}
MLP_IN, MLP_HIDDEN, CLASSES = 64, 256, 10
CNN_SHAPE = (3, 32, 32)


def make_data(kind: str, records: Optional[int] = None) -> torch.utils.data.TensorDataset:
    """Synthetic classification data for ``kind`` (``mlp``: 64 features; ``cnn``: 3x32x32 images)."""
    n = records or DATA[kind][0]
    g = torch.Generator().manual_seed(SEED)
    shape = (MLP_IN,) if kind == "mlp" else CNN_SHAPE
    x = torch.randn(n, *shape, generator=g)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    return torch.utils.data.TensorDataset(x, y)


def make_model(kind: str, width: int = 32) -> torch.nn.Module:
    """``mlp``: 64-256-256-10 (overhead-dominated); ``cnn``: three 3x3 conv layers of ``width``,
    ``2 * width`` and ``4 * width`` channels + a linear layer (compute-dominated)."""
    torch.manual_seed(SEED)
    if kind == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(MLP_IN, MLP_HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(MLP_HIDDEN, MLP_HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(MLP_HIDDEN, CLASSES),
        )
    if kind == "cnn":
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(width, 2 * width, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(2 * width, 4 * width, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * width, CLASSES),
        )
    raise ValueError(f"unknown model kind {kind!r}")


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def batches_forever(loader: torch.utils.data.DataLoader, sampler: Any = None) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (``set_epoch`` on a distributed sampler)."""
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


class PlainLoop:
    """The plain PyTorch loop, one batch per :meth:`step`: same model, data, batch size and
    optimizer as ``BenchTrial``, a torch ``DataLoader`` with shuffling, one process."""

    def __init__(self, kind: str, width: int = 32) -> None:
        loader = torch.utils.data.DataLoader(make_data(kind), batch_size=DATA[kind][1], shuffle=True)
        self.model = make_model(kind, width)
        self.opt = make_optimizer(self.model)
        self.model.train()
        self._it = batches_forever(loader)

    def step(self) -> None:
        x, y = next(self._it)
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
