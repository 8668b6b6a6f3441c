"""Devices: a worker's default device and moving nested batches to it (Determined's
``determined.pytorch.to_device``)."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence, Set, Union

import numpy as np
import torch

from determined_lite.distributed import DistributedContext

logger = logging.getLogger("determined_lite.pytorch")

TorchData = Union[Dict[str, Any], Sequence[Any], np.ndarray, torch.Tensor]


def default_device(distributed: DistributedContext) -> torch.device:
    """``cuda:<local_rank>`` when CUDA is present, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", distributed.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def move_to_device(
    data: Any, device: torch.device, non_blocking: bool, warned: Optional[Set[type]] = None
) -> Any:
    """``data`` with its tensors and numeric numpy arrays on ``device`` (dicts, lists, tuples and
    namedtuples rebuilt); a leaf that cannot move is returned as is, with one warning per type
    while ``warned`` (the types already warned about) is given."""
    if isinstance(data, torch.Tensor):
        if data.device == device:
            return data
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, np.ndarray) and data.dtype.kind in "fciub":
        return torch.from_numpy(data).to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        return {k: move_to_device(v, device, non_blocking, warned) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(move_to_device(v, device, non_blocking, warned) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(move_to_device(v, device, non_blocking, warned) for v in data)
    if callable(getattr(data, "to", None)):  # a type with its own move, as Determined calls it
        return data.to(device)
    if warned is not None and type(data) not in warned:
        warned.add(type(data))
        logger.warning(f"Was not able to move data item of type '{type(data).__name__}' to device.")
    return data


def to_device(
    data: Any, device: Union[str, torch.device], warned_types: Optional[Set[type]] = None
) -> Any:
    """Determined's ``determined.pytorch.to_device``: move the tensors and numeric numpy arrays
    nested in ``data`` (dicts, lists, tuples) to ``device``; anything else is returned as is,
    with a warning once per type (per call, or across calls sharing ``warned_types``)."""
    warned = set() if warned_types is None else warned_types
    return move_to_device(data, torch.device(device), non_blocking=False, warned=warned)
