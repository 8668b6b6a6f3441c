"""A batch_sampler whose len() differs from what it yields (issue 12, item 10).

Determined's DataLoader.get_data_loader(repeat=True) wraps the batch_sampler in
RepeatBatchSampler (its passes end to end), then DistributedBatchSampler (global batch i to
rank i % N) and SkipBatchSampler; the epoch length is len() of the chief's loader
(ceil(len(batch_sampler) / N)). So training goes on, and epochs are counts of batches, not
passes. det-lite raised "training epoch 0 has 5 batches on this rank, but the epoch length
is 3" instead.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterator, List

import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.linear import LinearTrial

PASS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]  # what one pass yields


class LyingBatchSampler:
    """Yields PASS (rotated by the epoch, so passes differ) but says it has ``length`` batches,
    like the word-language-model example's sampler."""

    def __init__(self, length: int) -> None:
        self.length, self.epoch = length, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[List[int]]:
        k = self.epoch % len(PASS)
        return iter(PASS[k:] + PASS[:k])


def stream(length_passes: int) -> List[List[int]]:
    out: List[List[int]] = []
    for p in range(length_passes):
        out += PASS[p:] + PASS[:p]
    return out


class SamplerTrial(LinearTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.seen: List[tuple] = []

    def build_training_data_loader(self) -> pytorch.DataLoader:
        x = torch.arange(10, dtype=torch.float64).unsqueeze(1)
        dataset = torch.utils.data.TensorDataset(x, 2 * x)
        return pytorch.DataLoader(dataset, batch_sampler=LyingBatchSampler(self.context.get_hparam("len")))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        self.seen.append((epoch_idx, batch[0].squeeze(1).int().tolist()))
        return super().train_batch(batch, epoch_idx, batch_idx)


def fit(length: int, batches: int, tmp_path: Any, latest: Any = None) -> tuple:
    conf = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    hp = {"lr": 0.001, "global_batch_size": 2, "len": length}
    with pytorch.init(hparams=hp, exp_conf=conf, enable_tensorboard_logging=False) as ctx:
        trial = SamplerTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(batches), latest_checkpoint=latest, progress=False, record=False
        )
    return trial, result


@pytest.mark.parametrize("length", [3, 8])  # says fewer batches than it yields, and more
def test_epoch_is_len_batches_of_the_repeated_sampler(length: int, tmp_path: Any) -> None:
    with pytest.warns(UserWarning) as record:
        trial, result = fit(length, 12, tmp_path)
    mismatch = [str(w.message) for w in record if "len(batch_sampler)" in str(w.message)]
    assert mismatch == [
        f"det-lite DataLoader: len(batch_sampler) is {length} but one pass of it yields 5 batches; "
        f"as in Determined, a training epoch is {length} batches of the batch_sampler repeated end "
        "to end, and a validation pass is what it yields (5 batches)"
    ]
    expected = stream(3)[:12]
    assert [b for _, b in trial.seen] == expected
    assert [e for e, _ in trial.seen] == [i // length for i in range(12)]
    # Resuming mid-stream continues it exactly, weights included.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, part = fit(length, 7, tmp_path / "a")
        resumed, rest = fit(length, 12, tmp_path / "a", latest=part.latest_checkpoint)
    assert [b for _, b in resumed.seen] == expected[7:]
    assert resumed.recorder.weights[-1] == trial.recorder.weights[-1]


def test_two_ranks_share_the_stream_round_robin() -> None:
    x = torch.arange(10, dtype=torch.float64).unsqueeze(1)
    loader = pytorch.DataLoader(torch.utils.data.TensorDataset(x), batch_sampler=LyingBatchSampler(3))
    with pytest.warns(UserWarning, match="len"):
        assert loader.sharding.epoch_length(2) == 2  # Determined: len of rank 0's share of 3
    full = stream(2)
    for rank in (0, 1):
        it = iter(loader.sharding.training_loader(seed=0, rank=rank, num_replicas=2, start_batch=1))
        got = [next(it)[0].squeeze(1).int().tolist() for _ in range(4)]
        assert got == full[2 + rank :: 2][:4]
    assert len(loader) == 3  # the DataLoader's len() is the batch_sampler's, as in Determined
