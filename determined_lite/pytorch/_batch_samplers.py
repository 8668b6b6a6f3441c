"""The batch samplers behind det-lite's per-rank torch loaders (``_sharding.Sharding``): the
infinite training stream of one rank, Determined's stream over a user's batch_sampler, and one
finite (validation) pass. Each yields batches of keys, with their load seeds in worker processes."""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Union

import torch
import torch.utils.data

from determined_lite.pytorch._fetch import SeededBatch

# One batch: a list of dataset keys (ints for the default order), or a tensor of the indices
# when det-lite reads a TensorDataset a batch at a time in this process (Sharding.index_keys).
Batch = Union[list, torch.Tensor]


class TrainingBatchSampler(torch.utils.data.Sampler):
    """Infinite stream of one rank's batches from global batch ``start_batch`` on.

    ``epoch_batches(e)`` builds epoch ``e``'s batches for this rank once; the
    stream crosses epoch boundaries by asking for the next epoch.
    """

    def __init__(
        self,
        epoch_batches: Callable[[int], list[Batch]],
        epoch_length: int,
        start_batch: int,
        batch_seed: Optional[Callable[[int], int]] = None,
    ) -> None:
        super().__init__()
        self._epoch_batches = epoch_batches
        self._epoch_length = epoch_length
        self._start_batch = start_batch
        self._batch_seed = batch_seed

    def __iter__(self) -> Iterator[Batch]:
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
                    yield SeededBatch(batches[i], self._batch_seed(first + i))
            offset = 0
            epoch += 1


class StreamBatchSampler(torch.utils.data.Sampler):
    """Determined's training stream over a batch_sampler: its passes repeated end to end (pass
    ``p`` after ``set_epoch(p)``), dealt round-robin (global batch ``g`` to rank ``g % N``), from
    this rank's batch ``start_batch`` on. Epoch boundaries are a count of batches, not passes."""

    def __init__(
        self,
        pass_batches: Callable[[int], list[Batch]],
        num_replicas: int,
        rank: int,
        start_batch: int,
        batch_seed: Optional[Callable[[int], int]] = None,
    ) -> None:
        super().__init__()
        self._pass_batches = pass_batches
        self._num_replicas = num_replicas
        self._rank = rank
        self._start_batch = start_batch
        self._batch_seed = batch_seed

    def __iter__(self) -> Iterator[Batch]:
        n, index = self._num_replicas, self._start_batch  # this rank's batch index
        wanted = index * n + self._rank  # its global batch index in the stream
        first, pass_idx = 0, 0  # global index of the current pass's first batch
        while True:
            batches = self._pass_batches(pass_idx)
            if not batches:
                raise RuntimeError(f"the batch_sampler yielded no batch in pass {pass_idx}")
            while wanted < first + len(batches):
                batch = batches[wanted - first]
                yield batch if self._batch_seed is None else SeededBatch(batch, self._batch_seed(index))
                index, wanted = index + 1, wanted + n
            first, pass_idx = first + len(batches), pass_idx + 1


class PassBatchSampler(torch.utils.data.Sampler):
    """One finite pass over batches that ``make_batches()`` builds when iterated."""

    def __init__(
        self,
        make_batches: Callable[[], list[Batch]],
        length: int,
        batch_seed: Optional[Callable[[int], int]] = None,
    ) -> None:
        super().__init__()
        self._make_batches = make_batches
        self._length = length
        self._batch_seed = batch_seed

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Batch]:
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
                yield SeededBatch(batch, self._batch_seed(i))
