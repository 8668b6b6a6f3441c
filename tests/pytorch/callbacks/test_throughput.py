"""Throughput: samples/s and batches/s per report, without start-up, validation or checkpoints.

A fake clock makes the numbers exact: each training batch takes 0.5 s, except the first of the
run (100 s of start-up); each validation batch 10 s and each checkpoint 7 s. Excluding start-up,
validation and checkpoints leaves 2 batches/s and 8 samples/s (4 records per batch)."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from determined_lite import pytorch
from determined_lite.pytorch.callbacks import Throughput
from determined_lite.pytorch.callbacks._throughput import BATCHES_PER_SECOND, SAMPLES_PER_SECOND
from tests.fixtures.cb_trial import fit_cb_trial
from tests.fixtures.tb import scalars


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Tick(pytorch.PyTorchCallback):
    """Advances the clock as if the work took time (placed after Throughput)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.first = True

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.clock.now += 100.0 if self.first else 0.5
        self.first = False

    def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.clock.now += 10.0

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self.clock.now += 7.0


def rates(history: List[Any]) -> List[Any]:
    return [(step, r[SAMPLES_PER_SECOND], r[BATCHES_PER_SECOND]) for step, r in history]


def test_rates_exclude_start_up_validation_and_checkpoints() -> None:
    clock = Clock()
    meter = Throughput(clock=clock)
    trial, _ = fit_cb_trial(
        max_batches=8,
        validation=4,
        checkpoint_period=2,
        reporting=2,
        trainer_callbacks=[meter, Tick(clock)],
    )
    # Reports at 2, 4, 6, 8; the first window holds batch 1 only (batch 0 is start-up).
    assert rates(meter.history) == [(2, 8.0, 2.0), (4, 8.0, 2.0), (6, 8.0, 2.0), (8, 8.0, 2.0)]
    written = scalars(str(trial.context.get_tensorboard_path()))
    assert written[SAMPLES_PER_SECOND] == [(2, 8.0), (4, 8.0), (6, 8.0), (8, 8.0)]
    assert written[BATCHES_PER_SECOND] == [(2, 2.0), (4, 2.0), (6, 2.0), (8, 2.0)]


def test_without_warmup_the_first_batch_counts() -> None:
    clock = Clock()
    meter = Throughput(warmup_batches=0, clock=clock)
    fit_cb_trial(max_batches=4, validation=None, reporting=4, trainer_callbacks=[meter, Tick(clock)])
    # 4 batches in 101.5 s.
    assert rates(meter.history) == [(4, pytest.approx(16 / 101.5), pytest.approx(4 / 101.5))]


def test_a_report_inside_the_warmup_has_no_rate() -> None:
    clock = Clock()
    meter = Throughput(warmup_batches=3, clock=clock)
    fit_cb_trial(max_batches=6, validation=None, reporting=2, trainer_callbacks=[meter, Tick(clock)])
    # Warm-up ends after batch 2 (within the window of the report at 4): that window counts batch 3.
    assert rates(meter.history) == [(4, 8.0, 2.0), (6, 8.0, 2.0)]


def test_bad_warmup() -> None:
    with pytest.raises(ValueError, match="warmup_batches"):
        Throughput(warmup_batches=-1)


def test_batches_without_a_tensor_give_batches_per_second_only() -> None:
    clock = Clock()
    meter = Throughput(clock=clock)
    cb = Tick(clock)
    meter.setup(FakeContext())
    meter.on_training_start()
    for i in range(3):
        cb.on_train_batch_start(None, i)
        meter.on_train_batch_start({"text": ["a", "b"]}, i)
        meter.on_train_batch_end({}, i)
    meter.on_training_workload_end({}, [])
    assert meter.history == [(3, {BATCHES_PER_SECOND: 2.0})]


class FakeContext:
    """What Throughput reads of a context."""

    class distributed:  # noqa: N801 -- mirrors context.distributed
        size, is_chief = 1, True

    class harness:  # noqa: N801
        class state:  # noqa: N801
            batches_done = 3

    def get_tensorboard_path(self) -> None:
        return None
