"""CheckLoss: a NaN or infinite loss fails the trial at once, naming the batch."""

from __future__ import annotations

from typing import Any, Optional

import torch

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext


class NonFiniteLossError(FloatingPointError):
    """A loss passed to ``context.backward`` was NaN or infinite."""


class CheckLoss(PyTorchCallback):
    """Checks every loss passed to ``context.backward`` before gradients are computed.

    A NaN or infinite loss raises :class:`NonFiniteLossError` naming the batch (and the rank),
    before it can reach the weights. The check reads the loss's value, so on a GPU it waits for
    the batch's forward pass once per ``backward``.
    """

    def __init__(self) -> None:
        self._batch_idx: Optional[int] = None
        self._rank = 0

    def setup(self, context: PyTorchTrialContext) -> None:
        self._rank = context.distributed.rank

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._batch_idx = batch_idx

    def on_before_backward(self, loss: torch.Tensor) -> None:
        if bool(torch.isfinite(loss).all()):
            return None
        value = loss.detach().flatten()[~torch.isfinite(loss.detach().flatten())][0].item()
        raise NonFiniteLossError(
            f"the loss is {value} at batch {self._batch_idx} (rank {self._rank}); gradients were not "
            "computed from it. Check that batch's data, the learning rate and the loss function"
        )
