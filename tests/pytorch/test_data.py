"""Tests for det-lite's reproducible, shardable DataLoader."""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Iterator, List

import numpy as np
import pytest
import torch
import torch.utils.data

from determined_lite.pytorch._data import DataLoader


def _ds(n: int) -> torch.utils.data.TensorDataset:
    """A dataset whose record i is the tensor i, so a batch shows which records it holds."""
    return torch.utils.data.TensorDataset(torch.arange(n))


def _batches(loader: torch.utils.data.DataLoader, count: int = -1) -> List[List[int]]:
    """Record ids of the first ``count`` batches (all of them when count < 0)."""
    it: Iterator = iter(loader)
    if count >= 0:
        it = itertools.islice(it, count)
    return [batch[0].tolist() for batch in it]


def _flat(batches: List[List[int]]) -> List[int]:
    return [i for batch in batches for i in batch]


def _train(dl: DataLoader, count: int, **kwargs: Any) -> List[List[int]]:
    kwargs.setdefault("seed", 0)
    return _batches(dl.sharding.training_loader(**kwargs), count)


def _steps(dl: DataLoader, replicas: int, count: int, **kwargs: Any) -> List[List[int]]:
    """Per step, the concatenation of every rank's training batch in rank order."""
    per_rank = [_train(dl, count, rank=r, num_replicas=replicas, **kwargs) for r in range(replicas)]
    return [_flat(list(step)) for step in zip(*per_rank)]


# --- single process ------------------------------------------------------------------


def test_single_process_batches_and_epoch_length() -> None:
    dl = DataLoader(_ds(10), batch_size=4)
    assert len(dl) == 3
    assert dl.sharding.epoch_length() == 3
    assert _train(dl, 5) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [0, 1, 2, 3], [4, 5, 6, 7]]
    assert _batches(dl.sharding.validation_loader()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(dl.sharding.validation_loader()) == 3


def test_drop_last_single_process() -> None:
    dl = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert len(dl) == 2
    assert dl.sharding.epoch_length() == 2
    assert _train(dl, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert _batches(dl.sharding.validation_loader()) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_epoch_length_values() -> None:
    assert DataLoader(_ds(12), batch_size=4).sharding.epoch_length() == 3
    assert DataLoader(_ds(13), batch_size=4).sharding.epoch_length() == 4
    assert DataLoader(_ds(13), batch_size=4, drop_last=True).sharding.epoch_length() == 3
    assert DataLoader(_ds(10), batch_size=2).sharding.epoch_length(2) == 3
    assert DataLoader(_ds(16), batch_size=2).sharding.epoch_length(4) == 2
    with pytest.warns(UserWarning, match="last 1 records"):
        assert DataLoader(_ds(17), batch_size=2).sharding.epoch_length(4) == 2  # 1 < 4 ranks
    assert DataLoader(_ds(20), batch_size=2).sharding.epoch_length(4) == 3  # tail 4 = 1 each
    assert DataLoader(_ds(20), batch_size=2, drop_last=True).sharding.epoch_length(4) == 2


def test_attributes_are_read_only() -> None:
    ds = _ds(5)
    dl = DataLoader(ds, batch_size=2, shuffle=True, drop_last=True)
    assert (dl.dataset, dl.batch_size, dl.shuffle, dl.drop_last, dl.num_workers) == (ds, 2, True, True, 0)
    with pytest.raises(AttributeError):
        dl.batch_size = 3  # type: ignore[misc]
    assert DataLoader(ds, batch_sampler=[[0, 1]]).batch_size is None


# --- shuffling -----------------------------------------------------------------------


def _epoch_orders(seed: int, n: int = 20, epochs: int = 2) -> List[List[int]]:
    dl = DataLoader(_ds(n), batch_size=3, shuffle=True)
    length = dl.sharding.epoch_length()
    batches = _train(dl, length * epochs, seed=seed)
    return [_flat(batches[e * length : (e + 1) * length]) for e in range(epochs)]


def test_shuffle_is_a_per_epoch_permutation_of_the_seed() -> None:
    e0, e1 = _epoch_orders(seed=7)
    assert sorted(e0) == list(range(20)) and sorted(e1) == list(range(20))
    assert e0 != list(range(20))
    assert e0 != e1
    assert _epoch_orders(seed=7) == [e0, e1]
    assert _epoch_orders(seed=8)[0] != e0


def test_shuffle_ignores_global_rng() -> None:
    torch.manual_seed(1)
    np.random.seed(1)
    first = _epoch_orders(seed=3)
    torch.manual_seed(12345)
    np.random.seed(999)
    torch.rand(10)
    assert _epoch_orders(seed=3) == first


def test_validation_uses_the_epoch_zero_order() -> None:
    dl = DataLoader(_ds(20), batch_size=3, shuffle=True)
    val = _batches(dl.sharding.validation_loader(seed=5))
    assert val == _train(dl, dl.sharding.epoch_length(), seed=5)
    assert _batches(dl.sharding.validation_loader(seed=5)) == val


# --- sharding the training stream ------------------------------------------------------


def test_two_replicas_match_one_replica_with_double_batch() -> None:
    dl2 = DataLoader(_ds(10), batch_size=2)
    assert _train(dl2, 3, rank=0, num_replicas=2) == [[0, 1], [4, 5], [8]]
    assert _train(dl2, 3, rank=1, num_replicas=2) == [[2, 3], [6, 7], [9]]
    assert _steps(dl2, 2, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dl4 = DataLoader(_ds(10), batch_size=4)
    assert _steps(dl2, 2, 6) == _train(dl4, 6)


def test_replicas_match_with_shuffle_and_cover_every_record() -> None:
    dl2 = DataLoader(_ds(23), batch_size=3, shuffle=True)
    dl1 = DataLoader(_ds(23), batch_size=6, shuffle=True)
    length = dl2.sharding.epoch_length(2)
    assert length == dl1.sharding.epoch_length() == 4
    steps = _steps(dl2, 2, 2 * length, seed=11)
    assert steps == _train(dl1, 2 * length, seed=11)
    for e in range(2):
        assert sorted(_flat(steps[e * length : (e + 1) * length])) == list(range(23))


def test_tail_split_larger_chunks_first() -> None:
    dl = DataLoader(_ds(11), batch_size=2)  # global batch 6: one full, then a tail of 5
    per_rank = [_train(dl, 2, rank=r, num_replicas=3) for r in range(3)]
    assert per_rank == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10]]]


def test_tail_too_small_for_every_rank_is_dropped_with_one_warning() -> None:
    dl = DataLoader(_ds(9), batch_size=4)
    with pytest.warns(UserWarning, match=r"last 1 records.*num_replicas=2"):
        assert dl.sharding.epoch_length(2) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _train(dl, 2, rank=1, num_replicas=2) == [[4, 5, 6, 7], [4, 5, 6, 7]]
        assert dl.sharding.epoch_length(1) == 3  # one rank: nothing is dropped
    # validation still sees the record that training skips
    assert _flat(_batches(dl.sharding.validation_loader(rank=1, num_replicas=2))) == [8]


def test_drop_last_drops_a_usable_tail_silently() -> None:
    dl = DataLoader(_ds(10), batch_size=2, drop_last=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dl.sharding.epoch_length(2) == 2
    assert _steps(dl, 2, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]


# --- resuming --------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2])
def test_start_batch_yields_the_tail_of_the_stream(replicas: int) -> None:
    dl = DataLoader(_ds(10), batch_size=2 if replicas == 2 else 3, shuffle=True)
    length = dl.sharding.epoch_length(replicas)
    total = 3 * length + 1
    for rank in range(replicas):
        full = _train(dl, total, seed=4, rank=rank, num_replicas=replicas)
        for k in [1, length - 1, length, length + 1, 2 * length + 1]:
            resumed = _train(dl, total - k, seed=4, rank=rank, num_replicas=replicas, start_batch=k)
            assert resumed == full[k:], (rank, k)


# --- validation sharding ---------------------------------------------------------------


@pytest.mark.parametrize(
    "replicas, expected",
    [
        (1, [[[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10]]]),
        (2, [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10]]]),
        (3, [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8]], [[9, 10]]]),
        (6, [[[0, 1, 2]], [[3, 4, 5]], [[6, 7, 8]], [[9, 10]], [], []]),
    ],
)
def test_validation_sharding(replicas: int, expected: List[List[List[int]]]) -> None:
    dl = DataLoader(_ds(11), batch_size=3)
    loaders = [dl.sharding.validation_loader(rank=r, num_replicas=replicas) for r in range(replicas)]
    per_rank = [_batches(loader) for loader in loaders]
    assert per_rank == expected
    assert [len(loader) for loader in loaders] == [len(b) for b in expected]
    assert sorted(_flat([i for rank in per_rank for i in rank])) == list(range(11))


@pytest.mark.parametrize("replicas", [2, 3, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_validation_concat_equals_single_process_with_shuffle(replicas: int, drop_last: bool) -> None:
    dl = DataLoader(_ds(11), batch_size=3, shuffle=True, drop_last=drop_last)
    single = _batches(dl.sharding.validation_loader(seed=2))
    assert len(single) == (3 if drop_last else 4)
    sharded = [
        batch
        for r in range(replicas)
        for batch in _batches(dl.sharding.validation_loader(rank=r, num_replicas=replicas, seed=2))
    ]
    assert sharded == single


def test_validation_of_an_empty_dataset_yields_nothing() -> None:
    dl = DataLoader(_ds(0), batch_size=3)
    assert len(dl) == 0
    assert _batches(dl.sharding.validation_loader()) == []


# --- global RNG ------------------------------------------------------------------------


def _loaders(dl: DataLoader) -> List[torch.utils.data.DataLoader]:
    return [
        dl.sharding.training_loader(seed=3),
        dl.sharding.training_loader(seed=3, rank=1, num_replicas=2, start_batch=5),
        dl.sharding.validation_loader(),
        dl.sharding.validation_loader(rank=1, num_replicas=2, seed=9),
        dl.get_data_loader(repeat=True, skip=2),
        dl.get_data_loader(repeat=False, skip=1),
    ]


@pytest.mark.parametrize("shuffle", [False, True])
def test_iterating_never_touches_the_global_rng(shuffle: bool) -> None:
    dl = DataLoader(_ds(10), batch_size=2, shuffle=shuffle)
    torch.manual_seed(0)
    for loader in _loaders(dl):
        state = torch.random.get_rng_state()
        it = iter(loader)
        next(it)
        assert torch.equal(torch.random.get_rng_state(), state)


def test_plain_torch_loader_would_touch_the_global_rng() -> None:
    """Guards the test above: a loader without its own generator does change the state."""
    state = torch.random.get_rng_state()
    iter(torch.utils.data.DataLoader(_ds(4), batch_size=2))
    assert not torch.equal(torch.random.get_rng_state(), state)


def test_loader_generators_are_deterministic() -> None:
    dl = DataLoader(_ds(10), batch_size=2)

    def seed_of(**kwargs: Any) -> int:
        return dl.sharding.training_loader(**kwargs).generator.initial_seed()

    assert seed_of(seed=1) == seed_of(seed=1)
    assert seed_of(seed=1) != seed_of(seed=2)
    assert seed_of(seed=1) != seed_of(seed=1, start_batch=3)
    first = dl.sharding.validation_loader(seed=1).generator.initial_seed()
    assert dl.sharding.validation_loader(seed=1).generator.initial_seed() == first


# --- batch structures ------------------------------------------------------------------


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, items: List[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]


def _first_validation_batch(items: List[Any], batch_size: int = 2) -> Any:
    dl = DataLoader(_ListDataset(items), batch_size=batch_size)
    return next(iter(dl.sharding.validation_loader()))


def test_dict_items_collate() -> None:
    batch = _first_validation_batch([{"x": torch.tensor([float(i)]), "y": i} for i in range(3)])
    assert set(batch) == {"x", "y"}
    assert torch.equal(batch["x"], torch.tensor([[0.0], [1.0]]))
    assert batch["y"].tolist() == [0, 1]


def test_tuple_items_collate() -> None:
    batch = _first_validation_batch([(torch.full((2,), i), i * 10) for i in range(4)])
    assert torch.equal(batch[0], torch.tensor([[0, 0], [1, 1]]))
    assert batch[1].tolist() == [0, 10]


def test_nested_items_and_numpy_arrays_collate() -> None:
    items = [
        {
            "a": [np.full(3, i, dtype=np.float32), torch.tensor(i)],
            "b": {"c": float(i), "s": f"r{i}"},
        }
        for i in range(5)
    ]
    batch = _first_validation_batch(items, batch_size=3)
    assert torch.equal(batch["a"][0], torch.tensor([[0.0] * 3, [1.0] * 3, [2.0] * 3]))
    assert batch["a"][1].tolist() == [0, 1, 2]
    assert batch["b"]["c"].tolist() == [0.0, 1.0, 2.0]
    assert batch["b"]["s"] == ["r0", "r1", "r2"]


def test_custom_collate_fn_is_used() -> None:
    dl = DataLoader(_ds(5), batch_size=2, collate_fn=lambda items: [int(x[0]) for x in items])
    assert list(dl.sharding.validation_loader()) == [[0, 1], [2, 3], [4]]


# --- errors ----------------------------------------------------------------------------


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


class _NoLen:
    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("dataset", [_Stream(), _NoLen()])
def test_unsized_or_iterable_datasets_are_rejected(dataset: Any) -> None:
    with pytest.raises(ValueError, match="map-style") as info:
        DataLoader(dataset, batch_size=2)
    assert "context.experimental.disable_dataset_reproducibility_checks()" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sampler": [0, 1], "shuffle": True}, "sampler option is mutually exclusive with shuffle"),
        ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler.*batch_size=2"),
        ({"batch_sampler": [[0]], "shuffle": True}, "batch_sampler.*shuffle=True"),
        ({"batch_sampler": [[0]], "drop_last": True}, "batch_sampler.*drop_last=True"),
        ({"batch_sampler": [[0]], "sampler": [0]}, "batch_sampler.*sampler="),
        ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        ({"batch_size": None}, "batch_size=None"),
        ({"batch_size": 2.0}, "batch_size must be an int"),
        ({"num_workers": -1}, "num_workers must be an int >= 0, got -1"),
        ({"timeout": -1}, "timeout must be a number >= 0"),
        ({"prefetch_factor": 2}, "prefetch_factor needs num_workers > 0"),
        ({"persistent_workers": True}, "persistent_workers=True needs num_workers > 0"),
        ({"collate_fn": 3}, "collate_fn must be callable"),
        ({"sampler": 5}, "sampler must be an iterable"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DataLoader(_ds(4), **kwargs)


def test_empty_training_epoch_is_a_clear_error() -> None:
    dl = DataLoader(_ds(3), batch_size=4, drop_last=True)
    with pytest.raises(ValueError, match=r"no batches.*3 records, batch_size=4.*num_replicas=1"):
        dl.sharding.training_loader(seed=0)
    with pytest.raises(ValueError, match=r"1 records, batch_size=2.*num_replicas=2"):
        DataLoader(_ds(1), batch_size=2).sharding.epoch_length(2)


def test_bad_rank_arguments() -> None:
    dl = DataLoader(_ds(4), batch_size=2)
    with pytest.raises(ValueError, match="rank must be in"):
        dl.sharding.validation_loader(rank=2, num_replicas=2)
    with pytest.raises(ValueError, match="num_replicas"):
        dl.sharding.training_loader(seed=0, num_replicas=0)
    with pytest.raises(ValueError, match="start_batch"):
        dl.sharding.training_loader(seed=0, start_batch=-1)
    with pytest.raises(ValueError, match="seed"):
        dl.sharding.training_loader(seed=-1)


# --- custom samplers -------------------------------------------------------------------


class _RotatingSampler(torch.utils.data.Sampler):
    """Reverse order, rotated by the epoch; records every set_epoch call."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.epoch = 0
        self.calls: List[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.calls.append(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = list(range(self.n - 1, -1, -1))
        shift = self.epoch % self.n
        return iter(order[shift:] + order[:shift])


def test_custom_sampler_set_epoch_drives_the_order() -> None:
    sampler = _RotatingSampler(6)
    dl = DataLoader(_ds(6), batch_size=4, sampler=sampler)
    assert len(dl) == 2
    assert _train(dl, 4) == [[5, 4, 3, 2], [1, 0], [4, 3, 2, 1], [0, 5]]
    assert sampler.calls == [0, 1]
    sampler.calls.clear()
    # global batch 5 = epoch 2 (rotated by 2), second batch; then epoch 3 (rotated by 3)
    assert _train(dl, 2, start_batch=5) == [[5, 4], [2, 1, 0, 5]]
    assert sampler.calls == [2, 3]
    sampler.calls.clear()
    assert _batches(dl.sharding.validation_loader()) == [[5, 4, 3, 2], [1, 0]]
    assert sampler.calls == [0]


def test_sampler_without_len_is_counted() -> None:
    dl = DataLoader(_ds(10), batch_size=2, sampler=range(9, 2, -1))
    assert len(dl) == 4
    assert _train(dl, 4) == [[9, 8], [7, 6], [5, 4], [3]]


class _EpochBatchSampler:
    """User batches of uneven sizes; records set_epoch calls."""

    def __init__(self, batches: List[List[int]]) -> None:
        self.batches = batches
        self.calls: List[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.calls.append(epoch)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[List[int]]:
        return iter(self.batches)


def test_custom_batch_sampler_training_sharding() -> None:
    user = _EpochBatchSampler([[0, 1], [2], [3, 4, 5], [6], [7, 8]])
    dl = DataLoader(_ds(9), batch_sampler=user)
    assert len(dl) == 5
    assert _train(dl, 6) == [[0, 1], [2], [3, 4, 5], [6], [7, 8], [0, 1]]
    assert user.calls == [0, 1]
    with pytest.warns(UserWarning, match="last 1 batches"):
        assert dl.sharding.epoch_length(2) == 2
    assert _train(dl, 3, rank=0, num_replicas=2) == [[0, 1], [3, 4, 5], [0, 1]]
    assert _train(dl, 3, rank=1, num_replicas=2) == [[2], [6], [2]]


def test_custom_batch_sampler_validation_sharding() -> None:
    user = _EpochBatchSampler([[0, 1], [2], [3, 4, 5], [6], [7, 8]])
    dl = DataLoader(_ds(9), batch_sampler=user)
    assert _batches(dl.sharding.validation_loader(rank=0, num_replicas=2)) == [[0, 1], [2], [3, 4, 5]]
    assert _batches(dl.sharding.validation_loader(rank=1, num_replicas=2)) == [[6], [7, 8]]
    assert _batches(dl.sharding.validation_loader(rank=5, num_replicas=6)) == []


def test_changing_epoch_size_is_an_error() -> None:
    class Growing(_EpochBatchSampler):
        def set_epoch(self, epoch: int) -> None:
            self.batches = [[i] for i in range(2 + epoch)]

    dl = DataLoader(_ds(5), batch_sampler=Growing([[0], [1]]))
    with pytest.raises(RuntimeError, match="same size"):
        _train(dl, 5)


# --- Determined's get_data_loader ------------------------------------------------------


def test_get_data_loader() -> None:
    dl = DataLoader(_ds(10), batch_size=3, shuffle=True)
    stream = _train(dl, 8, seed=0)
    assert _batches(dl.get_data_loader(repeat=True), 8) == stream
    assert _batches(dl.get_data_loader(repeat=True, skip=3), 5) == stream[3:]
    assert _batches(dl.get_data_loader()) == stream[:4]
    skipped = dl.get_data_loader(skip=1)
    assert len(skipped) == 3
    assert _batches(skipped) == stream[1:4]
    assert _batches(dl.get_data_loader(skip=9)) == []
    assert _batches(dl.get_data_loader(num_replicas=2, rank=1)) == stream[2:4]


# --- workers ---------------------------------------------------------------------------


@pytest.mark.slow
def test_two_workers_one_pass() -> None:
    dl = DataLoader(_ds(10), batch_size=3, shuffle=True, num_workers=2)
    single = _batches(DataLoader(_ds(10), batch_size=3, shuffle=True).sharding.validation_loader(seed=1))
    loader = dl.sharding.validation_loader(seed=1)
    state = torch.random.get_rng_state()
    assert _batches(loader) == single
    assert torch.equal(torch.random.get_rng_state(), state)
    assert _batches(dl.sharding.training_loader(seed=1), 5)[:4] == single


# --- random augmentation in worker processes -------------------------------------------------


class _NoisyDataset(torch.utils.data.Dataset):
    """Record i is ``i + noise``; the noise comes from the loading process's torch RNG."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(float(i)) + torch.rand(())


def _values(loader: torch.utils.data.DataLoader, count: int) -> List[torch.Tensor]:
    return [batch for batch, _ in zip(loader, range(count))]


@pytest.mark.slow
def test_worker_augmentation_resumes_exactly_and_ignores_worker_count() -> None:
    dl = {w: DataLoader(_NoisyDataset(), batch_size=3, shuffle=True, num_workers=w) for w in (1, 2)}
    full = _values(dl[2].sharding.training_loader(seed=5, start_batch=0), 10)
    resumed = _values(dl[2].sharding.training_loader(seed=5, start_batch=6), 4)
    for a, b in zip(full[6:], resumed):
        assert torch.equal(a, b)
    one_worker = _values(dl[1].sharding.training_loader(seed=5, start_batch=0), 10)
    for a, b in zip(full, one_worker):
        assert torch.equal(a, b)
    # The noise is real (values are not integers) and differs between epochs of a record.
    flat = torch.cat(full)
    assert not torch.equal(flat, flat.floor())
    other_seed = _values(dl[2].sharding.training_loader(seed=6, start_batch=0), 1)
    assert not torch.equal(other_seed[0], full[0])


@pytest.mark.slow
def test_worker_augmentation_in_validation_is_the_same_across_ranks() -> None:
    dl = DataLoader(_NoisyDataset(), batch_size=3, num_workers=2)
    single = torch.cat(list(dl.sharding.validation_loader(seed=1)))
    shards = [dl.sharding.validation_loader(rank=r, num_replicas=2, seed=1) for r in range(2)]
    sharded = torch.cat([b for shard in shards for b in shard])
    assert torch.equal(single, sharded)
    assert torch.equal(single, torch.cat(list(dl.sharding.validation_loader(seed=1))))  # every pass
