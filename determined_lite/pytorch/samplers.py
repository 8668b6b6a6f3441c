"""Determined's ``determined.pytorch.samplers``: building blocks for loaders you build yourself.

With ``context.experimental.disable_dataset_reproducibility_checks()`` a trial may return a
plain ``torch.utils.data.DataLoader``; these samplers make its order reproducible, repeated,
sharded and resumable, with Determined's names, arguments and semantics:

- ``ReproducibleShuffleSampler(sampler, seed)`` / ``ReproducibleShuffleBatchSampler``: each
  pass is a fresh permutation drawn from ``numpy.random.RandomState(seed)``, so pass ``k``
  yields the same order as the ``k``-th pass of Determined's sampler with that seed.
- ``RepeatSampler`` / ``RepeatBatchSampler``: the wrapped order again and again, forever.
- ``DistributedSampler(sampler, num_workers, rank)`` / ``DistributedBatchSampler``: the items
  ``i`` with ``i % num_workers == rank``; ``len()`` is what the rank yields from one pass, as
  in Determined (the first ``len % num_workers`` ranks one more; the harness uses the chief's
  epoch length on every rank, as Determined does).
- ``SkipSampler(sampler, skip)`` / ``SkipBatchSampler``: everything after the first ``skip``.

Order them as Determined says: shuffle, then repeat, then skip, then shard.

det-lite addition: every sampler here has ``set_epoch(epoch)``, passed down to the shuffle
underneath, which makes its *next* pass the permutation of pass ``epoch`` (counting from 0).
A resumed trial can therefore continue a shuffled stream exactly without replaying the
earlier passes, and det-lite's own ``DataLoader(sampler=...)`` (which calls ``set_epoch``
before every epoch) stays exactly resumable with these samplers.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, List

import numpy as np
import torch.utils.data

__all__ = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
]


def _check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_source(owner: str, name: str, source: Any) -> None:
    if isinstance(source, torch.utils.data.Dataset) and not isinstance(source, torch.utils.data.Sampler):
        raise TypeError(
            f"{owner}: {name} must be a sampler (an iterable of indices or index lists), got the "
            f"dataset {type(source).__name__}; wrap it first, e.g. "
            "torch.utils.data.SequentialSampler(dataset)"
        )
    if not hasattr(source, "__iter__"):
        raise TypeError(f"{owner}: {name} must be iterable, got {type(source).__name__}")


def _forward_set_epoch(source: Any, epoch: int) -> None:
    set_epoch = getattr(source, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


class _Shuffle(torch.utils.data.Sampler):
    """A fresh ``RandomState(seed)`` permutation of the wrapped items on every pass."""

    _what = "sampler"

    def __init__(self, source: Iterable, seed: int) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_source(owner, self._what, source)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
            raise ValueError(f"{owner}: seed must be an int in [0, 2**32), got {seed!r}")
        self._source = source
        self._seed = int(seed)
        self._rng = np.random.RandomState(self._seed)
        self._passes_drawn = 0  # permutations self._rng has produced so far
        self._next_pass = 0  # which permutation the next __iter__ yields

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass the permutation of pass ``epoch`` (0-based)."""
        self._next_pass = _check_int(type(self).__name__, "epoch", epoch, 0)

    def _advance_to(self, target: int) -> None:
        if self._passes_drawn > target:
            self._rng = np.random.RandomState(self._seed)
            self._passes_drawn = 0
        while self._passes_drawn < target:
            # A shuffle's draws depend only on the length: replaying one per pass puts the
            # generator exactly where ``target`` earlier passes would have left it.
            self._rng.shuffle(list(self._source))
            self._passes_drawn += 1

    def __iter__(self) -> Iterator:
        self._advance_to(self._next_pass)
        items: List[Any] = list(self._source)
        self._rng.shuffle(items)
        self._passes_drawn += 1
        self._next_pass += 1
        return iter(items)

    def __len__(self) -> int:
        return len(self._source)  # type: ignore[arg-type]


class ReproducibleShuffleSampler(_Shuffle):
    """Shuffles the indices of ``sampler`` reproducibly from ``seed`` (a new order every pass).

    Shuffle before repeating (a repeated sampler never ends) and before skipping.
    """

    _what = "sampler"


class ReproducibleShuffleBatchSampler(_Shuffle):
    """Shuffles the batches of ``batch_sampler`` reproducibly from ``seed``; the contents of each
    batch stay the same, so prefer :class:`ReproducibleShuffleSampler` where possible."""

    _what = "batch_sampler"


class _Repeat(torch.utils.data.Sampler):
    _what = "sampler"

    def __init__(self, source: Iterable) -> None:
        super().__init__()
        _check_source(type(self).__name__, self._what, source)
        self._source = source

    def set_epoch(self, epoch: int) -> None:
        """Passed to the wrapped sampler: its next pass is pass ``epoch``."""
        _forward_set_epoch(self._source, epoch)

    def __iter__(self) -> Iterator:
        while True:
            yielded = False
            for item in self._source:
                yielded = True
                yield item
            if not yielded:
                raise ValueError(f"{type(self).__name__}: the wrapped {self._what} yielded nothing")

    def __len__(self) -> int:
        """The length of one pass of the wrapped sampler."""
        return len(self._source)  # type: ignore[arg-type]


class RepeatSampler(_Repeat):
    """Yields the indices of ``sampler`` pass after pass, forever."""

    _what = "sampler"


class RepeatBatchSampler(_Repeat):
    """Yields the batches of ``batch_sampler`` pass after pass, forever."""

    _what = "batch_sampler"


class _Shard(torch.utils.data.Sampler):
    _what = "sampler"

    def __init__(self, source: Iterable, num_workers: int, rank: int) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_source(owner, self._what, source)
        self._num_workers = _check_int(owner, "num_workers", num_workers, 1)
        self._rank = _check_int(owner, "rank", rank, 0)
        if self._rank >= self._num_workers:
            raise ValueError(f"{owner}: rank must be < num_workers={self._num_workers}, got {rank!r}")
        self._source = source

    @property
    def num_workers(self) -> int:
        return self._num_workers

    @property
    def rank(self) -> int:
        return self._rank

    def set_epoch(self, epoch: int) -> None:
        """Passed to the wrapped sampler."""
        _forward_set_epoch(self._source, epoch)

    def __iter__(self) -> Iterator:
        for i, item in enumerate(self._source):
            if i % self._num_workers == self._rank:
                yield item

    def __len__(self) -> int:
        """What this rank yields from one pass, as Determined reports it: ``len // num_workers``,
        plus one on the first ``len % num_workers`` ranks."""
        full, extra = divmod(len(self._source), self._num_workers)  # type: ignore[arg-type]
        return full + (1 if self._rank < extra else 0)


class DistributedSampler(_Shard):
    """This rank's share of ``sampler``: the indices at positions ``rank``, ``rank + num_workers``, ...

    Unlike ``torch.utils.data.DistributedSampler`` it wraps another sampler (it does not
    shuffle or pad). Shard last: after shuffling, repeating and skipping.
    """

    _what = "sampler"


class DistributedBatchSampler(_Shard):
    """This rank's share of ``batch_sampler``: the batches at positions ``rank``,
    ``rank + num_workers``, ... Shard last: after shuffling, repeating and skipping."""

    _what = "batch_sampler"


class _Skip(torch.utils.data.Sampler):
    _what = "sampler"

    def __init__(self, source: Iterable, skip: int) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_source(owner, self._what, source)
        self._skip = _check_int(owner, "skip", skip, 0)
        self._source = source

    @property
    def skip(self) -> int:
        return self._skip

    def set_epoch(self, epoch: int) -> None:
        """Passed to the wrapped sampler."""
        _forward_set_epoch(self._source, epoch)

    def __iter__(self) -> Iterator:
        iterator = iter(self._source)
        for _ in range(self._skip):
            if next(iterator, _END) is _END:
                return
        yield from iterator

    def __len__(self) -> int:
        """The wrapped sampler's length, whatever the skip (skips apply to repeated streams)."""
        return len(self._source)  # type: ignore[arg-type]


_END = object()


class SkipSampler(_Skip):
    """Yields the indices of ``sampler`` after the first ``skip``. Skip after repeating (so the
    skip happens once), and prefer :class:`SkipBatchSampler`: det-lite and Determined count
    batches trained, not records."""

    _what = "sampler"


class SkipBatchSampler(_Skip):
    """Yields the batches of ``batch_sampler`` after the first ``skip``. Skip after repeating and
    before sharding, with ``skip`` = the batches of the unsharded stream already trained on
    (batches trained x number of workers under :class:`DistributedBatchSampler`)."""

    _what = "batch_sampler"
