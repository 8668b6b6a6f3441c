"""Devices: a worker's default device and moving nested batches to it (Determined's
``determined.pytorch.to_device``)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from determined_lite.distributed import DistributedContext

TorchData = Union[Dict[str, Any], Sequence[Any], np.ndarray, torch.Tensor]


def default_device(distributed: DistributedContext) -> torch.device:
    """``cuda:<local_rank>`` when CUDA is present, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", distributed.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def move_to_device(data: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(data, torch.Tensor):
        if data.device == device:
            return data
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, np.ndarray):
        if data.dtype == object:
            return data
        return torch.from_numpy(data).to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        return {k: move_to_device(v, device, non_blocking) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(move_to_device(v, device, non_blocking) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(move_to_device(v, device, non_blocking) for v in data)
    return data


def to_device(data: Any, device: Union[str, torch.device], warned_types: Optional[set] = None) -> Any:
    """Determined's ``determined.pytorch.to_device``: move the tensors and numeric numpy arrays
    nested in ``data`` (dicts, lists, tuples) to ``device``; anything else is returned as is.
    ``warned_types`` is accepted for Determined's signature (det-lite does not warn)."""
    return move_to_device(data, torch.device(device), non_blocking=False)
