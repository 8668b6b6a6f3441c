"""How det-lite loads the records of a batch: seeded per batch in worker processes, a plain
``TensorDataset`` a whole batch at a time, and the loop's own in-process iteration of a loader."""

from __future__ import annotations

import random
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.utils.data


def worker_batch_seed(seed: int, purpose: int, rank: int, index: int) -> int:
    """Seed of one batch's loading in a worker process (63 bits)."""
    state = np.random.SeedSequence([seed, purpose, rank, index]).generate_state(1, np.uint64)
    return int(state[0]) >> 1


class SeededBatch(list):
    """A batch of dataset keys with the seed its records are loaded with in a worker."""

    def __init__(self, keys: Iterable, seed: int) -> None:
        super().__init__(keys)
        self.seed = seed

    def __reduce__(self) -> Any:
        return (SeededBatch, (list(self), self.seed))


class WorkerSeededDataset(torch.utils.data.Dataset):
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


class BatchedTensorDataset(torch.utils.data.Dataset):
    """A ``TensorDataset`` read a whole batch at a time: one indexing of each tensor instead of
    ``len(batch)`` item reads and a ``torch.stack`` (about 5x less time per batch of 64 here).
    The batch equals what torch's default collate makes of the items: the same records in the
    same order, the same values, dtypes and shapes."""

    def __init__(self, dataset: torch.utils.data.TensorDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        return self.dataset[key]

    def __getitems__(self, keys: Sequence) -> tuple:
        """``keys``: a tensor of indices (``Sharding.index_keys``) or a sequence of them."""
        index = keys if isinstance(keys, torch.Tensor) else torch.as_tensor(list(keys), dtype=torch.long)
        return tuple([t[index] for t in self.dataset.tensors])


def already_collated(batch: Any) -> Any:
    return batch


def in_process_batches(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    """The batches of ``loader`` (one made by :meth:`Sharding.torch_loader`), as its own iterator
    yields them, without its per-batch overhead when it loads in this process.

    With no worker processes and no pinned memory, torch's iterator fetches each batch of the
    batch sampler (``__getitems__`` when the dataset has it, else item by item) and collates
    it; this does the same, minus the ``record_function`` profiling scope torch opens around
    every batch (about 18 us here, a third of det-lite's own per-batch cost). The scope is
    kept while a torch profiler is recording. Anything else uses the loader's own iterator.
    """
    if loader.num_workers > 0 or loader.pin_memory or loader.batch_sampler is None:
        return iter(loader)
    return _fetch_in_process(loader.dataset, loader.batch_sampler, loader.collate_fn)


def _fetch_in_process(
    dataset: Any, batch_sampler: Iterable[Sequence], collate: Callable[[Any], Any]
) -> Iterator[Any]:
    getitems = getattr(dataset, "__getitems__", None)

    def fetch_and_collate(keys: Sequence) -> Any:
        return collate(getitems(keys) if getitems else [dataset[k] for k in keys])

    # A batch read at once (BatchedTensorDataset) needs no collate call.
    fetch: Callable[[Sequence], Any] = (
        getitems if collate is already_collated and getitems is not None else fetch_and_collate
    )

    for keys in batch_sampler:
        if torch.autograd._profiler_enabled():
            with torch.autograd.profiler.record_function("det_lite.DataLoader.__next__"):
                batch = fetch(keys)
        else:
            batch = fetch(keys)
        yield batch


def fetches_batches(dataset: Any, collate_fn: Optional[Callable[[list], Any]]) -> bool:
    """Whether det-lite reads ``dataset`` a batch at a time: a plain ``TensorDataset`` (not a
    subclass, which may override ``__getitem__``) under torch's default collate."""
    return collate_fn is None and type(dataset) is torch.utils.data.TensorDataset
