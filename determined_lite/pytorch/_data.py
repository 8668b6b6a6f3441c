"""A reproducible, shardable stand-in for ``torch.utils.data.DataLoader``.

Trials return :class:`DataLoader` from ``build_training_data_loader`` and
``build_validation_data_loader``.  It only records the arguments; the harness
then asks it for real ``torch.utils.data.DataLoader`` objects whose batch
samplers decide which records each rank sees.  Doing the batching here (and not
in a plain torch loader) is what makes training resumable at any batch and
lets N slots with per-slot batch ``b`` see exactly the data that one slot with
batch ``b * N`` would see.
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.utils.data

__all__ = ["DataLoader"]

_Batch = list  # one batch: a list of dataset keys (ints for the default order)

_TRAINING = 0
_VALIDATION = 1


def _contiguous_share(total: int, parts: int, index: int) -> tuple[int, int]:
    """``(start, count)`` of part ``index`` when ``total`` items are cut into ``parts``
    contiguous parts whose sizes differ by at most one, larger parts first."""
    base, extra = divmod(total, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


def _loader_generator(seed: int, start: int, rank: int, purpose: int) -> torch.Generator:
    """A fresh torch generator for one torch DataLoader.

    Creating a torch DataLoader iterator draws its worker base seed from the
    loader's generator (or from the global torch RNG when there is none); a
    dedicated generator keeps the global RNG stream untouched.
    """
    state = np.random.SeedSequence([seed, start, rank, purpose]).generate_state(1, np.uint64)
    generator = torch.Generator()
    generator.manual_seed(int(state[0]) >> 1)  # 63 bits: always a valid torch seed
    return generator


def _length_of(obj: Any) -> Optional[int]:
    """``len(obj)``, or None when obj has no usable ``__len__``."""
    try:
        return len(obj)
    except (TypeError, NotImplementedError):
        return None


def _set_epoch(obj: Any, epoch: int) -> None:
    """Call ``obj.set_epoch(epoch)`` when the (user's) sampler offers it."""
    set_epoch = getattr(obj, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_replicas(rank: int, num_replicas: int) -> None:
    _check_int("num_replicas", num_replicas, 1)
    _check_int("rank", rank, 0)
    if rank >= num_replicas:
        raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")


def _rank_training_batches(
    order: Sequence, batch_size: int, num_replicas: int, rank: int, drop_last: bool
) -> list[_Batch]:
    """One epoch's training batches of ``rank``: its contiguous chunk of every global batch."""
    global_size = batch_size * num_replicas
    full, tail = divmod(len(order), global_size)
    lo = rank * batch_size
    batches = [list(order[j * global_size + lo : j * global_size + lo + batch_size]) for j in range(full)]
    if tail >= num_replicas and not drop_last:
        start, count = _contiguous_share(tail, num_replicas, rank)
        start += full * global_size
        batches.append(list(order[start : start + count]))
    return batches


def _training_length(num_records: int, batch_size: int, num_replicas: int, drop_last: bool) -> int:
    """Global batches per training epoch under the rules of :func:`_rank_training_batches`."""
    full, tail = divmod(num_records, batch_size * num_replicas)
    return full + (1 if tail >= num_replicas and not drop_last else 0)


def _batch_seed(seed: int, purpose: int, rank: int, index: int) -> int:
    """Seed of one batch's loading in a worker process (63 bits)."""
    state = np.random.SeedSequence([seed, purpose, rank, index]).generate_state(1, np.uint64)
    return int(state[0]) >> 1


class _SeededBatch(list):
    """A batch of dataset keys with the seed its records are loaded with in a worker."""

    def __init__(self, keys: Sequence, seed: int) -> None:
        super().__init__(keys)
        self.seed = seed

    def __reduce__(self) -> Any:
        return (_SeededBatch, (list(self), self.seed))


class _WorkerSeededDataset(torch.utils.data.Dataset):
    """Loads each batch in a worker with python/numpy/torch seeded from the batch's seed.

    Worker processes have their own RNGs that no checkpoint can capture; seeding per batch
    makes random augmentation in ``__getitem__`` depend only on the trial seed and the batch
    index, so resume is exact and the result does not depend on ``num_workers``. (With
    ``num_workers=0`` records load in the main process, whose RNGs checkpoints do capture.)
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        return self.dataset[key]

    def __getitems__(self, keys: Sequence) -> list:
        seed = getattr(keys, "seed", None)
        if seed is not None and torch.utils.data.get_worker_info() is not None:
            random.seed(seed)
            np.random.seed(seed % 2**32)
            torch.manual_seed(seed)
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(list(keys))
        return [self.dataset[k] for k in keys]


class _TrainingBatchSampler(torch.utils.data.Sampler):
    """Infinite stream of one rank's batches from global batch ``start_batch`` on.

    ``epoch_batches(e)`` builds epoch ``e``'s batches for this rank once; the
    stream crosses epoch boundaries by asking for the next epoch.
    """

    def __init__(
        self,
        epoch_batches: Callable[[int], list[_Batch]],
        epoch_length: int,
        start_batch: int,
        batch_seed: Optional[Callable[[int], int]] = None,
    ) -> None:
        super().__init__()
        self._epoch_batches = epoch_batches
        self._epoch_length = epoch_length
        self._start_batch = start_batch
        self._batch_seed = batch_seed

    def __iter__(self) -> Iterator[_Batch]:
        epoch, offset = divmod(self._start_batch, self._epoch_length)
        while True:
            batches = self._epoch_batches(epoch)
            if len(batches) != self._epoch_length:
                raise RuntimeError(
                    f"training epoch {epoch} has {len(batches)} batches on this rank, but the "
                    f"epoch length is {self._epoch_length}; det-lite needs every epoch to have "
                    "the same size (check your sampler/batch_sampler)"
                )
            if self._batch_seed is None:
                yield from batches[offset:]
            else:
                first = epoch * self._epoch_length
                for i in range(offset, len(batches)):
                    yield _SeededBatch(batches[i], self._batch_seed(first + i))
            offset = 0
            epoch += 1


class _PassBatchSampler(torch.utils.data.Sampler):
    """One finite pass over batches that ``make_batches()`` builds when iterated."""

    def __init__(
        self,
        make_batches: Callable[[], list[_Batch]],
        length: int,
        batch_seed: Optional[Callable[[int], int]] = None,
    ) -> None:
        super().__init__()
        self._make_batches = make_batches
        self._length = length
        self._batch_seed = batch_seed

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[_Batch]:
        batches = self._make_batches()
        if len(batches) != self._length:
            raise RuntimeError(
                f"expected {self._length} batches in this pass, got {len(batches)}; det-lite "
                "needs your sampler/batch_sampler to yield the same amount every epoch"
            )
        if self._batch_seed is None:
            yield from batches
        else:
            for i, batch in enumerate(batches):
                yield _SeededBatch(batch, self._batch_seed(i))


class DataLoader:
    """Drop-in for ``torch.utils.data.DataLoader`` that det-lite can shard and resume.

    Takes torch's constructor arguments but only validates and stores them;
    ``batch_size`` is the per-slot batch size.  The harness builds real torch
    loaders through :meth:`_training_loader` and :meth:`_validation_loader`.
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
        _check_dataset(dataset)
        shuffle = bool(shuffle)
        drop_last = bool(drop_last)
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
            batch_size = None
        elif batch_size is None:
            raise ValueError(
                "batch_size=None (auto-batching disabled) is not supported by det-lite's "
                "DataLoader: pass the per-slot batch size as a positive int"
            )
        else:
            _check_int("batch_size", batch_size, 1)
            batch_size = int(batch_size)
        if sampler is not None and not hasattr(sampler, "__iter__"):
            raise ValueError(f"sampler must be an iterable of dataset indices, got {sampler!r}")
        _check_int("num_workers", num_workers, 0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be a number >= 0 (seconds), got {timeout!r}")
        if prefetch_factor is not None:
            if num_workers == 0:
                raise ValueError("prefetch_factor needs num_workers > 0; leave it None with num_workers=0")
            _check_int("prefetch_factor", prefetch_factor, 0)
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers=True needs num_workers > 0")
        for name, fn in (("collate_fn", collate_fn), ("worker_init_fn", worker_init_fn)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be callable or None, got {fn!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {generator!r}")

        self._dataset = dataset
        self._batch_size = batch_size
        self._shuffle = shuffle
        self._sampler = sampler
        self._batch_sampler = batch_sampler
        self._num_workers = int(num_workers)
        self._collate_fn = collate_fn
        self._pin_memory = bool(pin_memory)
        self._drop_last = drop_last
        self._timeout = timeout
        self._worker_init_fn = worker_init_fn
        self._multiprocessing_context = multiprocessing_context
        self._generator = generator
        self._prefetch_factor = prefetch_factor
        self._persistent_workers = bool(persistent_workers)
        self._pin_memory_device = pin_memory_device
        self._warned_replicas: set[int] = set()

    # Read-only views of the constructor arguments, named like torch's attributes.
    @property
    def dataset(self) -> torch.utils.data.Dataset:
        return self._dataset

    @property
    def batch_size(self) -> Optional[int]:
        """Per-slot batch size; None with a custom batch_sampler (as in torch)."""
        return self._batch_size

    @property
    def shuffle(self) -> bool:
        return self._shuffle

    @property
    def drop_last(self) -> bool:
        return self._drop_last

    @property
    def num_workers(self) -> int:
        return self._num_workers

    def __len__(self) -> int:
        """Batches in one single-process epoch."""
        if self._batch_sampler is not None:
            return self._units_per_epoch()
        num_records = self._units_per_epoch()
        if self._drop_last:
            return num_records // self._batch_size
        return -(-num_records // self._batch_size)

    # --- epoch order -----------------------------------------------------------------

    def _units_per_epoch(self) -> int:
        """Records per epoch (or user batches per epoch with a custom batch_sampler)."""
        source = self._batch_sampler if self._batch_sampler is not None else self._sampler
        if source is None:
            return len(self._dataset)
        length = _length_of(source)
        if length is None:  # a sampler without __len__: count what epoch 0 yields
            length = len(self._epoch_units(seed=0, epoch=0))
        return length

    def _epoch_units(self, seed: int, epoch: int) -> list:
        """Epoch ``epoch``'s record order, or its user batches with a custom batch_sampler."""
        if self._batch_sampler is not None:
            _set_epoch(self._batch_sampler, epoch)
            return [list(batch) for batch in self._batch_sampler]
        if self._sampler is not None:
            _set_epoch(self._sampler, epoch)
            return list(self._sampler)
        n = len(self._dataset)
        if self._shuffle:
            return np.random.default_rng([seed, epoch]).permutation(n).tolist()
        return list(range(n))

    # --- training --------------------------------------------------------------------

    def _training_epoch_length(self, num_replicas: int = 1) -> int:
        """Batches per epoch on each rank (identical on every rank)."""
        _check_int("num_replicas", num_replicas, 1)
        units = self._units_per_epoch()
        if self._batch_sampler is not None:
            length, dropped = divmod(units, num_replicas)
            what = f"batch_sampler yields {units} batches per epoch"
        else:
            length = _training_length(units, self._batch_size, num_replicas, self._drop_last)
            full, dropped = divmod(units, self._batch_size * num_replicas)
            if self._drop_last or length > full:
                dropped = 0  # dropped on request, or the tail is trained on
            what = f"dataset of {units} records, batch_size={self._batch_size} per slot"
        if length == 0:
            raise ValueError(
                f"det-lite DataLoader: a training epoch has no batches ({what}, "
                f"num_replicas={num_replicas}, drop_last={self._drop_last}); use a larger "
                "dataset or a smaller batch size"
            )
        if dropped and num_replicas not in self._warned_replicas:
            self._warned_replicas.add(num_replicas)
            unit = "batches" if self._batch_sampler is not None else "records"
            warnings.warn(
                f"det-lite DataLoader: the last {dropped} {unit} of every training epoch "
                f"({what}) cannot be split over num_replicas={num_replicas} and are skipped "
                "in training; validation still sees every record",
                stacklevel=2,
            )
        return length

    def _rank_epoch_batches(self, seed: int, rank: int, num_replicas: int, epoch: int) -> list[_Batch]:
        """Training batches of ``rank`` for one epoch."""
        units = self._epoch_units(seed, epoch)
        if self._batch_sampler is not None:
            usable = len(units) - len(units) % num_replicas
            return units[rank:usable:num_replicas]
        return _rank_training_batches(units, self._batch_size, num_replicas, rank, self._drop_last)

    def _training_loader(
        self, *, seed: int, rank: int = 0, num_replicas: int = 1, start_batch: int = 0
    ) -> torch.utils.data.DataLoader:
        """Infinite: yields this rank's batches for global batch start_batch, start_batch+1, ...
        epoch after epoch (so a resumed stream equals the tail of an uninterrupted one)."""
        _check_int("seed", seed, 0)
        _check_replicas(rank, num_replicas)
        _check_int("start_batch", start_batch, 0)
        length = self._training_epoch_length(num_replicas)

        def epoch_batches(epoch: int) -> list[_Batch]:
            return self._rank_epoch_batches(seed, rank, num_replicas, epoch)

        sampler = _TrainingBatchSampler(
            epoch_batches, length, start_batch, self._worker_seeds(seed, _TRAINING, rank, 0)
        )
        return self._torch_loader(sampler, _loader_generator(seed, start_batch, rank, _TRAINING))

    # --- validation ------------------------------------------------------------------

    def _validation_share(self, num_replicas: int, rank: int) -> tuple[int, int]:
        """``(first, count)`` of the single-process validation batches that ``rank`` gets."""
        units = self._units_per_epoch()
        if self._batch_sampler is not None:
            total = units
        elif self._drop_last:
            total = units // self._batch_size
        else:
            total = -(-units // self._batch_size)
        return _contiguous_share(total, num_replicas, rank)

    def _validation_batches(self, seed: int, first: int, count: int) -> list[_Batch]:
        """Single-process validation batches ``first .. first+count-1`` (epoch-0 order)."""
        units = self._epoch_units(seed, 0)
        if self._batch_sampler is not None:
            return units[first : first + count]
        b = self._batch_size
        usable = len(units) - len(units) % b if self._drop_last else len(units)
        stop = min((first + count) * b, usable)
        return [units[i : min(i + b, stop)] for i in range(first * b, stop, b)]

    def _pass_loader(
        self, *, seed: int, rank: int, num_replicas: int, skip: int
    ) -> torch.utils.data.DataLoader:
        """One pass over this rank's validation share with its first ``skip`` batches skipped."""
        _check_int("seed", seed, 0)
        _check_replicas(rank, num_replicas)
        _check_int("skip", skip, 0)
        first, count = self._validation_share(num_replicas, rank)
        skip = min(skip, count)
        first, count = first + skip, count - skip

        def make_batches() -> list[_Batch]:
            return self._validation_batches(seed, first, count)

        # Keyed by the single-process batch index: the same records load with the same
        # seeds however many ranks share the pass.
        sampler = _PassBatchSampler(make_batches, count, self._worker_seeds(seed, _VALIDATION, 0, first))
        return self._torch_loader(sampler, _loader_generator(seed, skip, rank, _VALIDATION))

    def _validation_loader(
        self, *, rank: int = 0, num_replicas: int = 1, seed: int = 0
    ) -> torch.utils.data.DataLoader:
        """One pass over this rank's share of the validation set; every record exactly once
        across ranks, in single-process order when ranks are concatenated; may yield nothing."""
        return self._pass_loader(seed=seed, rank=rank, num_replicas=num_replicas, skip=0)

    # --- Determined's public API -----------------------------------------------------

    def get_data_loader(
        self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> torch.utils.data.DataLoader:
        """Determined's method: repeat=True -> the training stream (skip = batches to skip);
        repeat=False -> one validation-style pass (skip batches skipped). Seed 0."""
        if repeat:
            return self._training_loader(seed=0, rank=rank, num_replicas=num_replicas, start_batch=skip)
        return self._pass_loader(seed=0, rank=rank, num_replicas=num_replicas, skip=skip)

    def _worker_seeds(
        self, seed: int, purpose: int, rank: int, offset: int
    ) -> Optional[Callable[[int], int]]:
        """Per-batch seeds for loading in worker processes; None when loading in-process."""
        if self._num_workers == 0:
            return None
        return lambda index: _batch_seed(seed, purpose, rank, offset + index)

    def _torch_loader(
        self, batch_sampler: torch.utils.data.Sampler, generator: torch.Generator
    ) -> torch.utils.data.DataLoader:
        """A torch loader over the user's dataset driven by ``batch_sampler``."""
        dataset = self._dataset if self._num_workers == 0 else _WorkerSeededDataset(self._dataset)
        return torch.utils.data.DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            num_workers=self._num_workers,
            collate_fn=self._collate_fn,
            pin_memory=self._pin_memory,
            timeout=self._timeout,
            worker_init_fn=self._worker_init_fn,
            multiprocessing_context=self._multiprocessing_context,
            generator=generator,
            prefetch_factor=self._prefetch_factor,
            persistent_workers=self._persistent_workers,
            pin_memory_device=self._pin_memory_device,
        )


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
    if not hasattr(dataset, "__getitem__") or _length_of(dataset) is None:
        raise ValueError(
            f"{hint}; got {type(dataset).__name__}, which has no __len__ or __getitem__. {advice}"
        )
