"""PyTorchTrial: the class users subclass, with Determined's methods and defaults."""

from __future__ import annotations

import abc
from typing import Any, Dict, Union

import numpy as np
import torch

from determined_lite._errors import DataLengthError
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._device import TorchData
from determined_lite.pytorch._reducer import Reducer


def data_length(batch: Any) -> int:
    """Records in ``batch``: the length of the first tensor or array found, depth first.

    Nothing to count raises :class:`DataLengthError`, both the ``TypeError`` Determined raises
    for a value of the wrong type (``data_length(0)``) and the ``ValueError`` it raises for an
    empty container."""
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        if batch.ndim == 0:
            raise DataLengthError("cannot take the length of a 0-dimensional batch")
        return len(batch)
    if isinstance(batch, dict):
        items = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        items = list(batch)
    else:
        items = []
    for item in items:
        try:
            return data_length(item)
        except ValueError:
            continue
    raise DataLengthError(
        f"cannot find a tensor or array in a batch of type {type(batch).__name__} to count its "
        "records; override get_batch_length(batch) in your trial"
    )


class PyTorchTrial(abc.ABC):
    """A trial: models, optimizers and data built in ``__init__``, one step in ``train_batch``.

    Override exactly one of ``evaluate_batch`` (preferred: it is distributed across workers)
    and ``evaluate_full_dataset`` (runs once, on the chief, on the whole validation set).
    """

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        """Build and wrap models, optimizers and LR schedulers with ``context``."""

    @abc.abstractmethod
    def train_batch(
        self, batch: TorchData, epoch_idx: int, batch_idx: int
    ) -> Union[torch.Tensor, Dict[str, Any]]:
        """Train on one batch; return the loss tensor or a dict of training metrics."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> Any:
        """A ``determined_lite.pytorch.DataLoader`` over the training data."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> Any:
        """A ``determined_lite.pytorch.DataLoader`` over the validation data."""

    def build_callbacks(self) -> Dict[str, PyTorchCallback]:
        """Named callbacks; the name keys the callback's state in checkpoints."""
        return {}

    def evaluate_batch(self, batch: TorchData) -> Dict[str, Any]:
        """Metrics of one validation batch, reduced by ``evaluation_reducer()``."""
        raise NotImplementedError

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> Dict[str, Any]:
        """Final metrics over the whole validation set."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Union[Reducer, Dict[str, Reducer]]:
        """One reducer for all validation metrics, or one per metric name."""
        return Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        """Records in a batch; weights ``Reducer.AVG``. Default: length of the first tensor."""
        return data_length(batch)
