"""The chief's progress meter: throughput from the first batch, ETA, latest loss and metric."""

from __future__ import annotations

import types
from typing import List

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite._progress import TrialProgress
from determined_lite.pytorch._progress import ProgressMeter
from tests.fixtures.cb_trial import CbTrial


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _meter(clock: _Clock, seen: List[TrialProgress], *, start: int = 0, max_batches: int = 20, **kw):
    state = types.SimpleNamespace(batches_done=start, plan=types.SimpleNamespace(max_batches=max_batches))
    sink = lambda p: seen.append(TrialProgress.from_json(p.to_json()))  # noqa: E731 (a copy)
    return ProgressMeter(sink, "accuracy", state=state, clock=clock, **kw)  # type: ignore[arg-type]


def test_throughput_counts_from_the_end_of_the_first_batch():
    clock, seen = _Clock(), []
    meter = _meter(clock, seen, start=4, max_batches=24)  # resumed at batch 4
    meter.on_training_start()
    assert seen[-1].total_batches == 4 and seen[-1].max_batches == 24 and seen[-1].batches_per_s is None
    clock.now = 10.0  # ten seconds of start-up: imports, loaders, the first batch
    meter.on_train_batch_end({"loss": torch.tensor(2.0)}, 4)
    for i, t in enumerate([11.0, 12.0, 13.0, 14.0], start=5):
        clock.now = t
        meter.on_train_batch_end({"loss": torch.tensor(1.0 / i)}, i)
    last = seen[-1]
    assert last.total_batches == 9
    assert last.batches_per_s == pytest.approx(1.0)  # 4 batches in the 4 s after the first
    assert last.eta_s == pytest.approx(15.0)  # 15 batches to go
    assert last.loss is None  # no report yet: a batch's loss is never the bar's (issue 43)
    assert last.stats(elapsed_s=14) == ["00:14<00:15", "1 batch/s"]
    meter.on_training_workload_end({"loss": np.float64(0.3125)}, [])  # the period's mean
    assert seen[-1].stats(elapsed_s=14) == ["00:14<00:15", "1 batch/s", "loss=0.3125"]


def test_snapshots_are_throttled_but_validations_always_published():
    clock, seen = _Clock(), []
    meter = _meter(clock, seen, interval_s=0.5)
    meter.on_training_start()
    for i in range(10):
        clock.now = 0.01 * (i + 1)
        meter.on_train_batch_end({"loss": torch.tensor(float(i))}, i)
    assert len(seen) == 1  # nothing new within half a second of the first snapshot
    meter.on_training_workload_end({"loss": torch.tensor(4.5)}, [])  # a report: published at once
    assert len(seen) == 2 and seen[-1].loss == 4.5
    meter.on_validation_start()
    assert seen[-1].validating and seen[-1].total_batches == 10 and seen[-1].loss == 4.5
    meter.on_validation_end({"accuracy": np.float64(0.875), "loss": np.float64(0.3)})
    assert not seen[-1].validating and seen[-1].metric_value == 0.875
    assert seen[-1].stats(None)[-2:] == ["loss=4.5", "accuracy=0.875"]
    clock.now = 2.0
    meter.on_train_batch_end({"loss": torch.tensor(99.0)}, 10)
    assert seen[-1].loss == 4.5 and seen[-1].total_batches == 11  # a batch's loss is not shown
    meter.on_training_workload_end({"train_loss": torch.tensor(0.5), "acc": 1}, [])
    assert seen[-1].loss == 0.5  # no "loss": the first metric named like one
    meter.on_trial_shutdown()
    assert len(seen) == 7


class _LastLoss(pytorch.PyTorchCallback):
    """The loss of the latest training report (what the report line prints) and of the latest batch."""

    def on_train_batch_end(self, metrics, batch_idx):
        self.batch_loss = float(metrics["loss"])

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        self.loss = float(avg_metrics["loss"])


def test_the_meter_follows_the_real_loop():
    seen: List[TrialProgress] = []
    meter = ProgressMeter(lambda p: seen.append(TrialProgress.from_json(p.to_json())), None, interval_s=0)
    last = _LastLoss()
    with pytorch.init(
        hparams={"global_batch_size": 4}, exp_conf={"reproducibility": {"experiment_seed": 1}}
    ) as ctx:
        meter.bind(ctx)
        trial = CbTrial(ctx, {"last": last})
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(8),
            validation_period=pytorch.Batch(4),
            core_callbacks=[("test.progress", meter)],
        )
    assert seen[-1].total_batches == seen[-1].max_batches == 8 == result.total_batches
    batches = [p.total_batches for p in seen]
    assert batches == sorted(batches) and batches[0] == 0
    assert seen[-1].batches_per_s is not None and seen[-1].batches_per_s > 0
    # Without a searcher metric, the first number of the validation is shown.
    assert seen[-1].metric == "xmean" and seen[-1].metric_value == pytest.approx(3.5)
    assert seen[-1].loss == last.loss  # the report line's loss: the mean over the period
    assert last.loss != last.batch_loss  # (which is not the last batch's here)
