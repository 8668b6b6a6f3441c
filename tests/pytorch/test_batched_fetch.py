"""Batched fetching (issue 17, item 1): det-lite reads a plain TensorDataset a batch at a time,
and every batch is exactly what item-by-item reading with torch's default collate gives: the
same records in the same order, values, dtypes and shapes, on every rank, after a resume, in
validation, and in worker processes."""

from __future__ import annotations

import itertools
from typing import Any, List

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch._fetch import BatchedTensorDataset, fetches_batches, in_process_batches
from determined_lite.pytorch._sharding import Sharding


def _data(n: int = 23) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 2, generator=g)
    y = torch.arange(n, dtype=torch.int64) * 7
    w = torch.rand(n, generator=g, dtype=torch.float64)
    return torch.utils.data.TensorDataset(x, y, w)


def _per_item(loader: pytorch.DataLoader) -> Sharding:
    return Sharding(loader.sharding.args, batched_fetch=False)


def _same(a: List[Any], b: List[Any]) -> None:
    assert len(a) == len(b) and a
    for left, right in zip(a, b):
        assert len(left) == len(right)
        for s, t in zip(left, right):
            assert s.dtype == t.dtype and s.shape == t.shape
            assert torch.equal(s, t)


@pytest.mark.parametrize("shuffle, drop_last", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("num_replicas", [1, 2])
@pytest.mark.parametrize("start_batch", [0, 5])
def test_training_batches_are_those_of_item_by_item_reading(shuffle, drop_last, num_replicas, start_batch):
    loader = pytorch.DataLoader(_data(), batch_size=4, shuffle=shuffle, drop_last=drop_last)
    for rank in range(num_replicas):
        kwargs = dict(seed=11, rank=rank, num_replicas=num_replicas, start_batch=start_batch)
        fast = loader.sharding.training_loader(**kwargs)
        slow = _per_item(loader).training_loader(**kwargs)
        assert isinstance(fast.dataset, BatchedTensorDataset)
        assert not isinstance(slow.dataset, BatchedTensorDataset)
        # Three epochs' worth of the infinite stream (crossing epoch boundaries).
        _same(list(itertools.islice(fast, 17)), list(itertools.islice(slow, 17)))


@pytest.mark.parametrize("num_replicas", [1, 3])
def test_validation_batches_are_those_of_item_by_item_reading(num_replicas):
    loader = pytorch.DataLoader(_data(), batch_size=4)
    for rank in range(num_replicas):
        fast = list(loader.sharding.validation_loader(rank=rank, num_replicas=num_replicas))
        slow = list(_per_item(loader).validation_loader(rank=rank, num_replicas=num_replicas))
        _same(fast, slow)


def test_worker_processes_read_the_same_batches():
    loader = pytorch.DataLoader(_data(), batch_size=4, shuffle=True, num_workers=2)
    fast = loader.sharding.training_loader(seed=3, start_batch=2)
    slow = _per_item(loader).training_loader(seed=3, start_batch=2)
    _same(list(itertools.islice(fast, 9)), list(itertools.islice(slow, 9)))


def test_in_process_batches_are_slices_of_one_index_tensor_and_workers_get_lists():
    # Issue 27: the epoch's order becomes a tensor once; each batch is a slice of it (a view,
    # no per-batch list -> tensor), read a batch at a time. Worker batches carry seeds: lists.
    loader = pytorch.DataLoader(_data(), batch_size=4, shuffle=True)
    keys = list(itertools.islice(iter(loader.sharding.training_loader(seed=3).batch_sampler), 7))
    assert all(isinstance(k, torch.Tensor) and k.dtype == torch.long for k in keys)
    assert keys[1]._base is keys[0]._base is not None  # views of one epoch's order
    assert sorted(torch.cat(keys[:6]).tolist()) == list(range(23))  # epoch 0: every record once
    val = list(loader.sharding.validation_loader().batch_sampler)
    assert all(isinstance(k, torch.Tensor) for k in val)
    assert sorted(torch.cat(val).tolist()) == list(range(23))
    workers = pytorch.DataLoader(_data(), batch_size=4, shuffle=True, num_workers=1)
    first = next(iter(workers.sharding.training_loader(seed=3).batch_sampler))
    assert type(first).__name__ == "SeededBatch" and first == keys[0].tolist()


def test_batches_on_the_device_are_those_of_a_tensor_dataset_there():
    cpu = torch.device("cpu")
    assert pytorch.DataLoader(_data(), batch_size=4).sharding.batches_on(cpu)
    assert not pytorch.DataLoader(_data(), batch_size=4).sharding.batches_on(torch.device("meta"))
    assert not pytorch.DataLoader(_Items(), batch_size=3, collate_fn=_collate).sharding.batches_on(cpu)
    assert not _per_item(pytorch.DataLoader(_data(), batch_size=4)).batches_on(cpu)


def test_only_a_plain_tensor_dataset_under_the_default_collate_is_read_in_batches():
    class Augmented(torch.utils.data.TensorDataset):
        def __getitem__(self, index: int) -> Any:
            x, y, w = super().__getitem__(index)
            return x * 2, y, w

    data = _data()
    assert fetches_batches(data, None)
    assert not fetches_batches(data, lambda items: items)  # the user's collate sees items
    assert not fetches_batches(Augmented(*data.tensors), None)  # its __getitem__ is the user's
    assert not fetches_batches(list(zip(*data.tensors)), None)


def test_a_trial_trains_to_the_same_weights_either_way():
    # The whole loop on a shuffled TensorDataset: same final weight with and without batching.
    from tests.fixtures.linear import LinearTrial

    def final_weight(batched: bool, monkeypatch: pytest.MonkeyPatch) -> float:
        original = Sharding.__init__

        def init(self: Sharding, args: Any, batched_fetch: bool = True) -> None:
            original(self, args, batched_fetch=batched)

        monkeypatch.setattr(Sharding, "__init__", init)
        hp = {"lr": 0.01, "global_batch_size": 2}
        with pytorch.init(hparams=hp, exp_conf={"reproducibility": {"experiment_seed": 5}}) as ctx:
            trial = LinearTrial(ctx)
            pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(10))
            return float(trial.model.weight.item())

    with pytest.MonkeyPatch.context() as mp:
        batched = final_weight(True, mp)
    with pytest.MonkeyPatch.context() as mp:
        per_item = final_weight(False, mp)
    assert batched == per_item


# --- in-process iteration (issue 17, item 2): det-lite's loop fetches in-process batches itself --


class _Items(torch.utils.data.Dataset):
    """Per-item reads (no __getitems__) with a custom collate."""

    def __len__(self) -> int:
        return 11

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.tensor([float(i)]), "i": i}


def _collate(items: List[dict]) -> dict:
    return {"x": torch.cat([it["x"] for it in items]), "i": [it["i"] for it in items]}


@pytest.mark.parametrize("shuffle", [False, True])
def test_in_process_batches_equal_torchs_iterator(shuffle):
    for loader in (
        pytorch.DataLoader(_data(), batch_size=4, shuffle=shuffle),
        pytorch.DataLoader(_Items(), batch_size=3, shuffle=shuffle, collate_fn=_collate),
    ):
        for rank in range(2):
            train = dict(seed=5, rank=rank, num_replicas=2, start_batch=3)
            ours = list(itertools.islice(in_process_batches(loader.sharding.training_loader(**train)), 9))
            torchs = list(itertools.islice(iter(loader.sharding.training_loader(**train)), 9))
            val = dict(seed=5, rank=rank, num_replicas=2)
            ours += list(in_process_batches(loader.sharding.validation_loader(**val)))
            torchs += list(iter(loader.sharding.validation_loader(**val)))
            assert len(ours) == len(torchs) > 9
            for a, b in zip(ours, torchs):
                if isinstance(a, dict):
                    assert torch.equal(a["x"], b["x"]) and a["i"] == b["i"]
                else:
                    _same([a], [b])


def test_in_process_batches_leave_worker_and_pinned_loaders_to_torch():
    workers = pytorch.DataLoader(_data(), batch_size=4, num_workers=1).sharding.validation_loader()
    assert type(in_process_batches(workers)).__name__ == "_MultiProcessingDataLoaderIter"
    plain = pytorch.DataLoader(_data(), batch_size=4).sharding.validation_loader()
    assert type(in_process_batches(plain)).__name__ == "generator"


def test_in_process_batches_keep_a_profiler_label_while_profiling():
    loader = pytorch.DataLoader(_data(), batch_size=4).sharding.validation_loader()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert len(list(in_process_batches(loader))) == 6
    names = [e.name for e in prof.events()]
    assert names.count("det_lite.DataLoader.__next__") == 6
