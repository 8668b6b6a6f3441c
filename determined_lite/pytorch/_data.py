"""A reproducible, shardable stand-in for ``torch.utils.data.DataLoader``.

Trials return :class:`DataLoader` from ``build_training_data_loader`` and
``build_validation_data_loader``.  It only checks and records the arguments; the harness
then asks its :class:`~determined_lite.pytorch._sharding.Sharding` view for real
``torch.utils.data.DataLoader`` objects whose batch samplers decide which records each
rank sees.  Doing the batching here (and not
in a plain torch loader) is what makes training resumable at any batch and
lets N slots with per-slot batch ``b`` see exactly the data that one slot with
batch ``b * N`` would see.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import torch
import torch.utils.data

from determined_lite.pytorch._sharding import LoaderArgs, Sharding, check_int, length_of

__all__ = ["DataLoader"]


class DataLoader:
    """Drop-in for ``torch.utils.data.DataLoader`` that det-lite can shard and resume.

    Takes torch's constructor arguments but only validates and stores them;
    ``batch_size`` is the per-slot batch size.  The harness builds real torch
    loaders through its :attr:`sharding` view.
    ``generator`` is accepted for compatibility but unused: shuffling and
    worker seeds derive from the trial seed so that they can be reproduced.
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = False,
        sampler: Optional[Any] = None,
        batch_sampler: Optional[Any] = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable[[list], Any]] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        generator: Optional[torch.Generator] = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
    ) -> None:
        given = dict(locals())  # the arguments by name: LoaderArgs takes them without a second list
        _check_dataset(dataset)
        shuffle, drop_last = bool(shuffle), bool(drop_last)
        per_slot = _batch_size(batch_size, shuffle, sampler, batch_sampler, drop_last)
        _check_workers(num_workers, timeout, prefetch_factor, persistent_workers)
        for name, fn in (("collate_fn", collate_fn), ("worker_init_fn", worker_init_fn)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be callable or None, got {fn!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {generator!r}")
        checked = {
            "batch_size": per_slot,
            "shuffle": shuffle,
            "drop_last": drop_last,
            "num_workers": int(num_workers),
            "pin_memory": bool(pin_memory),
            "persistent_workers": bool(persistent_workers),
        }
        fields = {f.name: given[f.name] for f in dataclasses.fields(LoaderArgs)}
        self.sharding = Sharding(LoaderArgs(**{**fields, **checked}))

    # Read-only views of the constructor arguments, named like torch's attributes.
    @property
    def dataset(self) -> torch.utils.data.Dataset:
        return self.sharding.args.dataset

    @property
    def batch_size(self) -> Optional[int]:
        """Per-slot batch size; None with a custom batch_sampler (as in torch)."""
        return self.sharding.args.batch_size

    @property
    def shuffle(self) -> bool:
        return self.sharding.args.shuffle

    @property
    def drop_last(self) -> bool:
        return self.sharding.args.drop_last

    @property
    def num_workers(self) -> int:
        return self.sharding.args.num_workers

    def __len__(self) -> int:
        """Batches in one single-process epoch."""
        return self.sharding.batches_per_pass()

    # --- Determined's public API -----------------------------------------------------

    def get_data_loader(
        self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> torch.utils.data.DataLoader:
        """Determined's method: repeat=True -> the training stream (skip = batches to skip);
        repeat=False -> one validation-style pass (skip batches skipped). Seed 0."""
        if repeat:
            return self.sharding.training_loader(
                seed=0, rank=rank, num_replicas=num_replicas, start_batch=skip
            )
        return self.sharding.pass_loader(seed=0, rank=rank, num_replicas=num_replicas, skip=skip)


def _check_dataset(dataset: Any) -> None:
    """Reject datasets that det-lite cannot index reproducibly (iterable or unsized)."""
    hint = (
        "det-lite's DataLoader needs a map-style dataset (with __getitem__ and __len__) "
        "to shard and resume training reproducibly"
    )
    advice = (
        "To use it anyway, call context.experimental.disable_dataset_reproducibility_checks() "
        "and return a plain torch.utils.data.DataLoader instead"
    )
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise ValueError(f"{hint}; got IterableDataset {type(dataset).__name__}. {advice}")
    if not hasattr(dataset, "__getitem__") or length_of(dataset) is None:
        raise ValueError(
            f"{hint}; got {type(dataset).__name__}, which has no __len__ or __getitem__. {advice}"
        )


def _batch_size(
    batch_size: Optional[int], shuffle: bool, sampler: Any, batch_sampler: Any, drop_last: bool
) -> Optional[int]:
    """The per-slot batch size (None with a ``batch_sampler``), checked by torch's rules for the
    batching arguments (``batch_sampler`` excludes the others) and det-lite's (no
    ``batch_size=None``: det-lite batches to shard and resume)."""
    per_slot: Optional[int] = None
    if sampler is not None and shuffle:
        raise ValueError(
            "sampler option is mutually exclusive with shuffle=True: shuffle inside your sampler instead"
        )
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size (must stay 1), "
                f"shuffle, sampler and drop_last; got batch_size={batch_size!r}, "
                f"shuffle={shuffle}, sampler={sampler!r}, drop_last={drop_last}"
            )
        if not hasattr(batch_sampler, "__iter__"):
            raise ValueError(f"batch_sampler must be an iterable of index lists, got {batch_sampler!r}")
    elif batch_size is None:
        raise ValueError(
            "batch_size=None (auto-batching disabled) is not supported by det-lite's "
            "DataLoader: pass the per-slot batch size as a positive int"
        )
    else:
        check_int("batch_size", batch_size, 1)
        per_slot = int(batch_size)
    if sampler is not None and not hasattr(sampler, "__iter__"):
        raise ValueError(f"sampler must be an iterable of dataset indices, got {sampler!r}")
    return per_slot


def _check_workers(
    num_workers: int, timeout: float, prefetch_factor: Optional[int], persistent: bool
) -> None:
    """The loader-process arguments: counts, a timeout in seconds, and what needs workers."""
    check_int("num_workers", num_workers, 0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a number >= 0 (seconds), got {timeout!r}")
    if prefetch_factor is not None:
        if num_workers == 0:
            raise ValueError("prefetch_factor needs num_workers > 0; leave it None with num_workers=0")
        check_int("prefetch_factor", prefetch_factor, 0)
    if persistent and num_workers == 0:
        raise ValueError("persistent_workers=True needs num_workers > 0")
