"""Training lengths in Determined's units: batches, epochs and records."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping


@dataclasses.dataclass(frozen=True)
class TrainUnit:
    """A length of training; subclasses name the unit."""

    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 1:
            raise ValueError(f"{type(self).__name__} length must be a positive integer, got {self.value!r}")

    def to_batches(self, epoch_length: int, global_batch_size: int) -> int:
        """The same length in batches, given the epoch length (in batches) and global batch size."""
        raise NotImplementedError


class Batch(TrainUnit):
    """A length in training batches (one batch is one call of ``train_batch`` per slot)."""

    def to_batches(self, epoch_length: int, global_batch_size: int) -> int:
        return self.value


class Epoch(TrainUnit):
    """A length in passes over the training data."""

    def to_batches(self, epoch_length: int, global_batch_size: int) -> int:
        return self.value * epoch_length


class Record(TrainUnit):
    """A length in training records; rounded up to whole global batches."""

    def to_batches(self, epoch_length: int, global_batch_size: int) -> int:
        return -(-self.value // global_batch_size)


_UNITS = {"batches": Batch, "epochs": Epoch, "records": Record}
_NAMES = {cls: name for name, cls in _UNITS.items()}


def length_to_config(length: TrainUnit) -> Dict[str, int]:
    """Determined's ``{batches|epochs|records: n}`` form of ``length``; see :func:`length_from_config`."""
    return {_NAMES[type(length)]: length.value}


def length_from_config(value: Any, field: str = "max_length") -> TrainUnit:
    """Parse Determined's ``{batches|epochs|records: n}`` form (or a TrainUnit) into a TrainUnit."""
    if isinstance(value, TrainUnit):
        return value
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(
            f"{field}: expected one of {{batches: N}}, {{epochs: N}}, {{records: N}}, got {value!r}"
        )
    ((unit, n),) = value.items()
    if unit not in _UNITS:
        raise ValueError(f"{field}: unknown unit {unit!r}; expected batches, epochs or records")
    try:
        return _UNITS[unit](n)
    except ValueError as e:
        raise ValueError(f"{field}.{unit}: {e}") from None
