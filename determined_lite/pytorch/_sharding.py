"""How det-lite cuts a DataLoader's data into batches per rank: the sharding arithmetic.

:class:`Sharding` is the one internal view of a :class:`~determined_lite.pytorch.DataLoader`
that the harness uses: the epoch length per rank, the infinite training stream of one rank from
any global batch on, and one rank's share of a validation pass. Every rank's training batch
``j`` is its contiguous chunk of the single-slot batch ``j`` (so N slots with per-slot batch
``b`` see what one slot with batch ``b * N`` sees), and every validation record is seen exactly
once across ranks.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
import torch.utils.data

from determined_lite.pytorch._batch_samplers import (
    Batch,
    PassBatchSampler,
    StreamBatchSampler,
    TrainingBatchSampler,
)
from determined_lite.pytorch._fetch import (
    BatchedTensorDataset,
    WorkerSeededDataset,
    already_collated,
    fetches_batches,
    worker_batch_seed,
)

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


def length_of(obj: Any) -> Optional[int]:
    """``len(obj)``, or None when obj has no usable ``__len__``."""
    try:
        return len(obj)
    except (TypeError, NotImplementedError):
        return None


def set_epoch(obj: Any, epoch: int) -> None:
    """Call ``obj.set_epoch(epoch)`` when the (user's) sampler offers it."""
    set_epoch = getattr(obj, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_replicas(rank: int, num_replicas: int) -> None:
    check_int("num_replicas", num_replicas, 1)
    check_int("rank", rank, 0)
    if rank >= num_replicas:
        raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")


def _rank_training_batches(
    order: Batch, batch_size: int, num_replicas: int, rank: int, drop_last: bool
) -> list[Batch]:
    """One epoch's training batches of ``rank``: its contiguous chunk of every global batch
    (slices of ``order``, a list or a tensor of keys)."""
    global_size = batch_size * num_replicas
    full, tail = divmod(len(order), global_size)
    lo = rank * batch_size
    batches = [order[j * global_size + lo : j * global_size + lo + batch_size] for j in range(full)]
    if tail >= num_replicas and not drop_last:
        start, count = _contiguous_share(tail, num_replicas, rank)
        start += full * global_size
        batches.append(order[start : start + count])
    return batches


def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """det-lite's record order of a shuffled epoch (int64)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def _training_length(num_records: int, batch_size: int, num_replicas: int, drop_last: bool) -> int:
    """Global batches per training epoch under the rules of :func:`_rank_training_batches`."""
    full, tail = divmod(num_records, batch_size * num_replicas)
    return full + (1 if tail >= num_replicas and not drop_last else 0)


@dataclasses.dataclass(frozen=True)
class LoaderArgs:
    """The checked constructor arguments of a DataLoader (``batch_size`` is per slot; None with a
    custom ``batch_sampler``)."""

    dataset: Any
    batch_size: Optional[int]
    shuffle: bool
    sampler: Any
    batch_sampler: Any
    num_workers: int
    collate_fn: Optional[Callable[[list], Any]]
    pin_memory: bool
    drop_last: bool
    timeout: float
    worker_init_fn: Optional[Callable[[int], None]]
    multiprocessing_context: Any
    prefetch_factor: Optional[int]
    persistent_workers: bool
    pin_memory_device: str


class Sharding:
    """The harness's view of one DataLoader: epoch lengths and per-rank torch loaders."""

    def __init__(self, args: LoaderArgs, batched_fetch: bool = True) -> None:
        self.args = args
        self.batched_fetch = batched_fetch  # False: item by item, as torch's DataLoader reads
        self.warned_replicas: set[int] = set()
        self.warned_batch = False  # the global batch is larger than the dataset: said once
        self._yielded: Optional[int] = None  # batches the batch_sampler's first pass yields
        self._first_pass: Optional[list] = None  # that pass, handed to the next epoch_units(_, 0)

    def sampler_len_differs(self) -> bool:
        """Whether the custom batch_sampler's ``len()`` differs from the batches its first pass
        yields (said once, with both numbers). Training then follows Determined: the sampler
        is repeated end to end and an epoch is ``len(batch_sampler)`` batches."""
        sampler = self.args.batch_sampler
        length = None if sampler is None else length_of(sampler)
        if length is None:
            return False
        if self._yielded is None:
            # Counting iterates the sampler; the next reader of pass 0 gets this very pass, so
            # the sampler is iterated no more often than without the check.
            self._first_pass = self.epoch_units(seed=0, epoch=0)
            self._yielded = len(self._first_pass)
            if self._yielded != length:
                warnings.warn(
                    f"det-lite DataLoader: len(batch_sampler) is {length} but one pass of it yields "
                    f"{self._yielded} batches; as in Determined, a training epoch is {length} "
                    "batches of the batch_sampler repeated end to end, and a validation pass is "
                    f"what it yields ({self._yielded} batches)",
                    stacklevel=2,
                )
        return self._yielded != length

    @property
    def batch_size(self) -> int:
        """The per-slot batch size in records (only without a custom ``batch_sampler``)."""
        size = self.args.batch_size
        if size is None:
            raise RuntimeError("a DataLoader with a batch_sampler has no batch size in records")
        return size

    def batches_per_pass(self) -> int:
        """Batches in one single-process epoch (the DataLoader's ``len()``)."""
        if self.args.batch_sampler is not None:
            return self.units_per_epoch()
        num_records = self.units_per_epoch()
        if self.args.drop_last:
            return num_records // self.batch_size
        return -(-num_records // self.batch_size)

    def units_per_epoch(self) -> int:
        """Records per epoch (or user batches per epoch with a custom batch_sampler)."""
        source = self.args.batch_sampler if self.args.batch_sampler is not None else self.args.sampler
        if source is None:
            return len(self.args.dataset)
        length = length_of(source)
        if length is None:  # a sampler without __len__: count what epoch 0 yields
            length = len(self.epoch_units(seed=0, epoch=0))
        return length

    def epoch_units(self, seed: int, epoch: int) -> list:
        """Epoch ``epoch``'s record order, or its user batches with a custom batch_sampler."""
        if self.args.batch_sampler is not None:
            if epoch == 0 and self._first_pass is not None:
                first, self._first_pass = self._first_pass, None
                return first
            set_epoch(self.args.batch_sampler, epoch)
            return [list(batch) for batch in self.args.batch_sampler]
        if self.args.sampler is not None:
            set_epoch(self.args.sampler, epoch)
            return list(self.args.sampler)
        n = len(self.args.dataset)
        if self.args.shuffle:
            return _permutation(seed, epoch, n).tolist()
        return list(range(n))

    # --- training --------------------------------------------------------------------

    def epoch_length(self, num_replicas: int = 1) -> int:
        """Batches per epoch on each rank (identical on every rank)."""
        check_int("num_replicas", num_replicas, 1)
        units = self.units_per_epoch()
        if self.sampler_len_differs():
            # Determined's: the chief's len() of its DistributedBatchSampler, for every rank.
            return -(-units // num_replicas)
        if self.args.batch_sampler is not None:
            length, dropped = divmod(units, num_replicas)
            what = f"batch_sampler yields {units} batches per epoch"
        else:
            length = _training_length(units, self.batch_size, num_replicas, self.args.drop_last)
            full, dropped = divmod(units, self.batch_size * num_replicas)
            if self.args.drop_last or length > full:
                dropped = 0  # dropped on request, or the tail is trained on
            what = f"dataset of {units} records, batch_size={self.batch_size} per slot"
        if length == 0:
            raise ValueError(
                f"det-lite DataLoader: a training epoch has no batches ({what}, "
                f"num_replicas={num_replicas}, drop_last={self.args.drop_last}); use a larger "
                "dataset or a smaller batch size"
            )
        if self.args.batch_sampler is None and units < self.batch_size * num_replicas:
            self._warn_batch_over_dataset(units, num_replicas)
        if dropped and num_replicas not in self.warned_replicas:
            self.warned_replicas.add(num_replicas)
            unit = "batches" if self.args.batch_sampler is not None else "records"
            warnings.warn(
                f"det-lite DataLoader: the last {dropped} {unit} of every training epoch "
                f"({what}) cannot be split over num_replicas={num_replicas} and are skipped "
                "in training; validation still sees every record",
                stacklevel=2,
            )
        return length

    def _warn_batch_over_dataset(self, units: int, num_replicas: int) -> None:
        """Once: the global batch is larger than the dataset, so an epoch is one short batch."""
        if self.warned_batch:
            return
        self.warned_batch = True
        warnings.warn(
            f"det-lite DataLoader: the global batch ({self.batch_size} records per slot x "
            f"{num_replicas} slots = {self.batch_size * num_replicas}) is larger than the dataset "
            f"({units} records): every training epoch is one batch of {units} records",
            stacklevel=3,
        )

    def rank_epoch_batches(self, seed: int, rank: int, num_replicas: int, epoch: int) -> list[Batch]:
        """Training batches of ``rank`` for one epoch."""
        if self.args.batch_sampler is not None:
            units = self.epoch_units(seed, epoch)
            usable = len(units) - len(units) % num_replicas
            return units[rank:usable:num_replicas]
        order = self._epoch_keys(seed, epoch)
        return _rank_training_batches(order, self.batch_size, num_replicas, rank, self.args.drop_last)

    def reads_batches(self) -> bool:
        """Whether the dataset is read a batch at a time (:func:`fetches_batches`, unless this
        view reads item by item)."""
        return self.batched_fetch and fetches_batches(self.args.dataset, self.args.collate_fn)

    def index_keys(self) -> bool:
        """Whether batches are tensors of indices: a dataset read a batch at a time
        (:meth:`reads_batches`) in this process, in det-lite's order (no batch_sampler).
        The epoch's order becomes a tensor once and each batch is a slice of it, instead of a
        list of ints made a tensor on every batch. Worker processes get lists (their batches
        carry seeds)."""
        return self.args.batch_sampler is None and self.args.num_workers == 0 and self.reads_batches()

    def _epoch_keys(self, seed: int, epoch: int) -> Union[list, torch.Tensor]:
        """:meth:`epoch_units` without a batch_sampler, as a tensor under :meth:`index_keys`
        (det-lite's own shuffle made one without a list between)."""
        if not self.index_keys():
            return self.epoch_units(seed, epoch)
        if self.args.sampler is None and self.args.shuffle:
            return torch.from_numpy(_permutation(seed, epoch, len(self.args.dataset)))
        return torch.as_tensor(self.epoch_units(seed, epoch), dtype=torch.long)

    def batches_on(self, device: torch.device) -> bool:
        """Whether every batch is already a tuple of tensors on ``device`` (a TensorDataset read
        a batch at a time, its tensors there): moving one to the device changes nothing."""
        return self.reads_batches() and all(t.device == device for t in self.args.dataset.tensors)

    def training_loader(
        self, *, seed: int, rank: int = 0, num_replicas: int = 1, start_batch: int = 0
    ) -> torch.utils.data.DataLoader:
        """Infinite: yields this rank's batches for global batch start_batch, start_batch+1, ...
        epoch after epoch (so a resumed stream equals the tail of an uninterrupted one)."""
        check_int("seed", seed, 0)
        _check_replicas(rank, num_replicas)
        check_int("start_batch", start_batch, 0)
        length = self.epoch_length(num_replicas)
        seeds = self.worker_seeds(seed, _TRAINING, rank, 0)
        if self.sampler_len_differs():
            stream = StreamBatchSampler(
                lambda p: self.epoch_units(seed, p), num_replicas, rank, start_batch, seeds
            )
            return self.torch_loader(stream, _loader_generator(seed, start_batch, rank, _TRAINING))

        def epoch_batches(epoch: int) -> list[Batch]:
            return self.rank_epoch_batches(seed, rank, num_replicas, epoch)

        sampler = TrainingBatchSampler(epoch_batches, length, start_batch, seeds)
        return self.torch_loader(sampler, _loader_generator(seed, start_batch, rank, _TRAINING))

    # --- validation ------------------------------------------------------------------

    def validation_share(self, num_replicas: int, rank: int) -> tuple[int, int]:
        """``(first, count)`` of the single-process validation batches that ``rank`` gets."""
        units = self.units_per_epoch()
        if self.sampler_len_differs():
            total = self._yielded or 0  # what one pass yields
        elif self.args.batch_sampler is not None:
            total = units
        elif self.args.drop_last:
            total = units // self.batch_size
        else:
            total = -(-units // self.batch_size)
        return _contiguous_share(total, num_replicas, rank)

    def validation_batches(self, seed: int, first: int, count: int) -> list[Batch]:
        """Single-process validation batches ``first .. first+count-1`` (epoch-0 order)."""
        if self.args.batch_sampler is not None:
            return self.epoch_units(seed, 0)[first : first + count]
        units = self._epoch_keys(seed, 0)
        b = self.batch_size
        usable = len(units) - len(units) % b if self.args.drop_last else len(units)
        stop = min((first + count) * b, usable)
        return [units[i : min(i + b, stop)] for i in range(first * b, stop, b)]

    def pass_loader(
        self, *, seed: int, rank: int, num_replicas: int, skip: int
    ) -> torch.utils.data.DataLoader:
        """One pass over this rank's validation share with its first ``skip`` batches skipped."""
        check_int("seed", seed, 0)
        _check_replicas(rank, num_replicas)
        check_int("skip", skip, 0)
        first, count = self.validation_share(num_replicas, rank)
        skip = min(skip, count)
        first, count = first + skip, count - skip

        def make_batches() -> list[Batch]:
            return self.validation_batches(seed, first, count)

        # Keyed by the single-process batch index: the same records load with the same
        # seeds however many ranks share the pass.
        sampler = PassBatchSampler(make_batches, count, self.worker_seeds(seed, _VALIDATION, 0, first))
        return self.torch_loader(sampler, _loader_generator(seed, skip, rank, _VALIDATION))

    def validation_loader(
        self, *, rank: int = 0, num_replicas: int = 1, seed: int = 0
    ) -> torch.utils.data.DataLoader:
        """One pass over this rank's share of the validation set; every record exactly once
        across ranks, in single-process order when ranks are concatenated; may yield nothing."""
        return self.pass_loader(seed=seed, rank=rank, num_replicas=num_replicas, skip=0)

    def worker_seeds(
        self, seed: int, purpose: int, rank: int, offset: int
    ) -> Optional[Callable[[int], int]]:
        """Per-batch seeds for loading in worker processes; None when loading in-process."""
        if self.args.num_workers == 0:
            return None
        return lambda index: worker_batch_seed(seed, purpose, rank, offset + index)

    def torch_loader(
        self, batch_sampler: torch.utils.data.Sampler, generator: torch.Generator
    ) -> torch.utils.data.DataLoader:
        """A torch loader over the user's dataset driven by ``batch_sampler`` (a batch at a time
        when :meth:`reads_batches`)."""
        dataset, collate_fn = self.args.dataset, self.args.collate_fn
        if self.reads_batches():
            dataset, collate_fn = BatchedTensorDataset(dataset), already_collated
        if self.args.num_workers > 0:
            dataset = WorkerSeededDataset(dataset)
        return torch.utils.data.DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            num_workers=self.args.num_workers,
            collate_fn=collate_fn,
            pin_memory=self.args.pin_memory,
            timeout=self.args.timeout,
            worker_init_fn=self.args.worker_init_fn,
            multiprocessing_context=self.args.multiprocessing_context,
            generator=generator,
            prefetch_factor=self.args.prefetch_factor,
            persistent_workers=self.args.persistent_workers,
            pin_memory_device=self.args.pin_memory_device,
        )
