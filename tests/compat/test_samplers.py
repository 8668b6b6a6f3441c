"""determined.pytorch.samplers semantics, with exact index sequences.

The shuffles are numpy ``RandomState(seed)`` permutations, one per pass, as in Determined: the
literal lists below are what Determined's samplers yield for these seeds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from determined_lite.pytorch import DataLoader, samplers

SEED0_PASSES = [
    [2, 8, 4, 9, 1, 6, 7, 3, 0, 5],
    [3, 5, 1, 2, 9, 8, 0, 6, 7, 4],
    [2, 3, 8, 4, 5, 1, 0, 6, 9, 7],
]
PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def batches_of(sampler, size: int = 2) -> torch.utils.data.BatchSampler:
    return torch.utils.data.BatchSampler(sampler, size, drop_last=False)


def test_reproducible_shuffle_is_a_new_seeded_permutation_every_pass():
    s = samplers.ReproducibleShuffleSampler(torch.utils.data.SequentialSampler(range(10)), seed=0)
    assert len(s) == 10
    assert [list(s) for _ in range(3)] == SEED0_PASSES
    again = samplers.ReproducibleShuffleSampler(range(10), seed=0)
    assert list(again) == SEED0_PASSES[0]


def test_set_epoch_jumps_to_any_pass_forward_or_back():
    s = samplers.ReproducibleShuffleSampler(range(10), seed=0)
    s.set_epoch(2)
    assert list(s) == SEED0_PASSES[2]
    s.set_epoch(0)
    assert list(s) == SEED0_PASSES[0]
    assert list(s) == SEED0_PASSES[1]  # passes continue from where set_epoch put them
    s.set_epoch(1)
    s.set_epoch(1)
    assert list(s) == SEED0_PASSES[1]


def test_reproducible_shuffle_batch_sampler_keeps_batches_whole():
    s = samplers.ReproducibleShuffleBatchSampler(batches_of(range(10)), seed=3)
    assert len(s) == 5
    assert list(s) == [[6, 7], [8, 9], [2, 3], [0, 1], [4, 5]]
    assert list(s) == [[4, 5], [2, 3], [6, 7], [8, 9], [0, 1]]


def test_repeat_samplers_cycle_forever_with_one_pass_as_length():
    s = samplers.RepeatSampler([0, 1, 2])
    assert len(s) == 3
    assert list(itertools.islice(s, 8)) == [0, 1, 2, 0, 1, 2, 0, 1]
    shuffled = samplers.RepeatSampler(samplers.ReproducibleShuffleSampler(range(10), seed=0))
    assert list(itertools.islice(shuffled, 30)) == sum(SEED0_PASSES, [])
    b = samplers.RepeatBatchSampler(batches_of(range(5)))
    assert len(b) == 3
    assert list(itertools.islice(b, 4)) == [[0, 1], [2, 3], [4], [0, 1]]
    with pytest.raises(ValueError, match="RepeatSampler: the wrapped sampler yielded nothing"):
        next(iter(samplers.RepeatSampler([])))


def test_distributed_samplers_take_every_nth_item_and_report_their_own_length():
    # Determined's DistributedSampler/DistributedBatchSampler.__len__: len // num_workers, plus
    # one when len % num_workers > rank: each rank reports what it yields (issue 12, item 11;
    # det-lite rounded up on every rank, so short ranks over-reported).
    shards = [list(samplers.DistributedSampler(range(10), num_workers=3, rank=r)) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [len(samplers.DistributedSampler(range(10), 3, r)) for r in range(3)] == [4, 3, 3]
    bshards = [list(samplers.DistributedBatchSampler(batches_of(range(10)), 2, r)) for r in range(2)]
    assert bshards == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    assert [len(samplers.DistributedBatchSampler(batches_of(range(10)), 2, r)) for r in range(2)] == [3, 2]
    for n in (1, 2, 3, 4, 7):
        for sampler in (samplers.DistributedSampler, samplers.DistributedBatchSampler):
            assert [len(sampler(range(11), n, r)) for r in range(n)] == [
                len(list(sampler(range(11), n, r))) for r in range(n)
            ]
    assert list(samplers.DistributedSampler(range(4), 1, 0)) == [0, 1, 2, 3]


def test_skip_samplers_drop_the_first_items_and_keep_the_length():
    s = samplers.SkipSampler(range(10), skip=3)
    assert list(s) == [3, 4, 5, 6, 7, 8, 9] and len(s) == 10
    assert list(samplers.SkipSampler(range(3), skip=5)) == []
    b = samplers.SkipBatchSampler(samplers.RepeatBatchSampler(batches_of(range(10))), skip=4)
    assert list(itertools.islice(b, 3)) == [[8, 9], [0, 1], [2, 3]]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: samplers.DistributedSampler(range(4), 2, 2), "rank must be < num_workers=2, got 2"),
        (lambda: samplers.DistributedBatchSampler(PAIRS, 0, 0), "num_workers must be an int >= 1"),
        (lambda: samplers.DistributedSampler(range(4), 2, -1), "rank must be an int >= 0"),
        (lambda: samplers.SkipBatchSampler(PAIRS, -1), "SkipBatchSampler: skip must be an int >= 0"),
        (
            lambda: samplers.ReproducibleShuffleSampler(range(4), seed=-1),
            r"seed must be an int in \[0, 2\*\*32\)",
        ),
        (lambda: samplers.ReproducibleShuffleSampler(range(4), seed=1.5), "seed must be an int"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_dataset_instead_of_a_sampler_is_refused():
    data = torch.utils.data.TensorDataset(torch.arange(4))
    with pytest.raises(TypeError, match=r"sampler must be a sampler .*SequentialSampler\(dataset\)"):
        samplers.ReproducibleShuffleSampler(data, seed=0)


def test_determined_resume_recipe_and_set_epoch_both_continue_the_stream():
    """Shuffle, repeat, skip: a stream rebuilt with skip=k (or set_epoch) continues exactly."""

    def stream(skip: int = 0, epoch: int = 0):
        shuffle = samplers.ReproducibleShuffleSampler(range(8), seed=5)
        shuffle.set_epoch(epoch)
        return samplers.SkipBatchSampler(samplers.RepeatBatchSampler(batches_of(shuffle)), skip)

    full = list(itertools.islice(stream(), 12))
    rng = np.random.RandomState(5)
    passes = []
    for _ in range(3):
        order = list(range(8))
        rng.shuffle(order)
        passes.append(order)
    assert full == [p[i : i + 2] for p in passes for i in range(0, 8, 2)]
    assert list(itertools.islice(stream(skip=6), 6)) == full[6:]  # replays the skipped passes
    assert list(itertools.islice(stream(skip=2, epoch=1), 6)) == full[6:]  # jumps to pass 1


def test_det_lite_dataloader_with_a_shuffle_sampler_resumes_exactly():
    data = torch.utils.data.TensorDataset(torch.arange(8))
    loader = DataLoader(data, batch_size=2, sampler=samplers.ReproducibleShuffleSampler(range(8), seed=0))

    def first(n: int, skip: int):
        return [b[0].tolist() for b in itertools.islice(loader.get_data_loader(repeat=True, skip=skip), n)]

    full = first(12, 0)
    rng = np.random.RandomState(0)
    expected = []
    for _ in range(3):
        order = list(range(8))
        rng.shuffle(order)
        expected += [order[i : i + 2] for i in range(0, 8, 2)]
    assert full == expected
    assert first(6, 6) == full[6:]
