"""LR scheduler step modes, frequencies, aggregation and resume.

Every scheduler here is StepLR(step_size=1, gamma=0.5): each scheduler step halves the LR, so
the LR a batch trains with is ``LR0 · 0.5**(scheduler steps so far)``, exact in floating point.
Data: 8 records, batch 2 -> 4 batches per epoch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import LRScheduler
from tests.fixtures.linear import expected_weights
from tests.fixtures.loop_trials import LoopTrial

LR0 = 0.01
EPOCH_LEN = 4
N = 12
SEED_CONF = {"reproducibility": {"experiment_seed": 1}}


def run(
    mode: str,
    k: int,
    frequency: int = 1,
    max_batches: int = N,
    latest_checkpoint: Optional[str] = None,
    **hparams: Any,
) -> Tuple[LoopTrial, pytorch.TrainResult]:
    hp = {"lr": LR0, "global_batch_size": 2, "lr_step_mode": mode, "lr_frequency": frequency, **hparams}
    with pytorch.init(hparams=hp, exp_conf=SEED_CONF, aggregation_frequency=k) as ctx:
        trial = LoopTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches), latest_checkpoint=latest_checkpoint
        )
    return trial, result


def batch_xs(n: int) -> List[List[float]]:
    epoch = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
    return [epoch[i % 4] for i in range(n)]


def expected_weights_with_lrs(lrs: List[float], k: int, w0: float = 0.0) -> List[float]:
    """Weights after each batch when batch i trains (and, at a step, steps) with lrs[i]."""
    return expected_weights(w0, lrs, batch_xs(len(lrs)), aggregation=k)


# Scheduler steps completed before batch i (0-based) starts, per mode. STEP_EVERY_BATCH counts
# batches, but (as in Determined) the steps due within an aggregation window are taken after
# the window's optimizer step: never before an optimizer step has used the current LR.
STEPS_BEFORE: Dict[str, Callable[[int, int, int], int]] = {
    "STEP_EVERY_BATCH": lambda i, k, f: ((i // k) * k) // f,
    "STEP_EVERY_EPOCH": lambda i, k, f: (i // EPOCH_LEN) // f,
    "STEP_EVERY_OPTIMIZER_STEP": lambda i, k, f: (i // k) // f,
}


def check(trial: LoopTrial, steps_before: Callable[[int], int], k: int, n: int = N) -> None:
    expected = [LR0 * 0.5 ** steps_before(i) for i in range(n)]
    assert trial.lrs == expected
    final_lr = LR0 * 0.5 ** steps_before(n)
    assert trial.opt.param_groups[0]["lr"] == final_lr
    assert trial.sched.get_last_lr() == [final_lr]
    assert trial.sched.last_epoch == steps_before(n)
    got, want = trial.recorder.weights, expected_weights_with_lrs(expected, k)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert math.isclose(a, b, rel_tol=1e-12)


@pytest.mark.parametrize("mode", sorted(STEPS_BEFORE))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("frequency", [1, 2])
def test_step_modes(mode: str, k: int, frequency: int) -> None:
    trial, _ = run(mode, k, frequency)
    assert trial.sched.step_mode is LRScheduler.StepMode[mode]
    assert trial.sched.frequency == frequency
    check(trial, lambda i: STEPS_BEFORE[mode](i, k, frequency), k)


def test_optimizer_step_mode_counts_optimizer_steps_not_batches() -> None:
    trial, _ = run("STEP_EVERY_OPTIMIZER_STEP", k=3)
    # The LR halves only after batches 3, 6, 9, 12 (1-based).
    assert trial.lrs == [LR0] * 3 + [LR0 / 2] * 3 + [LR0 / 4] * 3 + [LR0 / 8] * 3
    assert trial.opt.param_groups[0]["lr"] == LR0 / 16


def test_batch_mode_with_aggregation_steps_after_the_optimizer_step() -> None:
    trial, _ = run("STEP_EVERY_BATCH", k=3)
    # Batches 1-3 train with LR0 (the first optimizer step uses it), then three steps at once.
    assert trial.lrs == [LR0] * 3 + [LR0 / 8] * 3 + [LR0 / 64] * 3 + [LR0 / 512] * 3
    assert trial.sched.last_epoch == N
    # The first optimizer step used LR0: the mean gradient at w = 0 is -(10 + 50 + 122) / 3.
    assert math.isclose(trial.recorder.weights[2], LR0 * (10 + 50 + 122) / 3, rel_tol=1e-12)


def test_batch_mode_with_aggregation_and_frequency_two() -> None:
    trial, _ = run("STEP_EVERY_BATCH", k=3, frequency=2)
    # Due after batches 2, 4, 6, 8, 10, 12 (1-based); taken at the steps after 3, 6, 9, 12.
    assert trial.lrs == [LR0] * 3 + [LR0 / 2] * 3 + [LR0 / 8] * 3 + [LR0 / 16] * 3
    assert trial.sched.last_epoch == 6


def test_no_scheduler_step_before_the_first_optimizer_step(recwarn: pytest.WarningsRecorder) -> None:
    for mode in ("STEP_EVERY_BATCH", "STEP_EVERY_OPTIMIZER_STEP"):
        run(mode, k=3, max_batches=6)
    # torch warns when scheduler.step() comes before optimizer.step() (it skips an LR value).
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]


def test_optimizer_step_mode_frequency_counts_optimizer_steps() -> None:
    trial, _ = run("STEP_EVERY_OPTIMIZER_STEP", k=2, frequency=2)
    # Optimizer steps after batches 2, 4, 6, ...; the LR halves after every 2nd: batches 4, 8, 12.
    assert trial.lrs == [LR0] * 4 + [LR0 / 2] * 4 + [LR0 / 4] * 4
    assert trial.sched.last_epoch == 3


def test_epoch_mode_with_frequency_two() -> None:
    trial, _ = run("STEP_EVERY_EPOCH", k=1, frequency=2)
    # 3 epochs of 4 batches: one step, after epoch 2.
    assert trial.lrs == [LR0] * 8 + [LR0 / 2] * 4
    assert trial.opt.param_groups[0]["lr"] == LR0 / 2


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("frequency", [1, 2])
def test_manual_step_is_never_stepped_by_the_harness(k: int, frequency: int) -> None:
    manual = [2, 4, 5, 10]  # after the first optimizer step even with k = 3
    trial, _ = run("MANUAL_STEP", k, frequency, manual_lr_steps=manual)
    check(trial, lambda i: sum(1 for s in manual if s < i), k)


def test_manual_step_without_trial_steps_keeps_the_lr() -> None:
    trial, _ = run("MANUAL_STEP", k=1)
    assert trial.lrs == [LR0] * N
    assert trial.sched.last_epoch == 0


@pytest.mark.parametrize(
    "mode, k, frequency, stop",
    [
        # 1 optimizer step done at the checkpoint: the step counter must survive for the
        # frequency-2 phase to continue correctly.
        ("STEP_EVERY_OPTIMIZER_STEP", 3, 2, 3),
        ("STEP_EVERY_BATCH", 1, 2, 5),
        ("STEP_EVERY_BATCH", 3, 1, 6),
        ("STEP_EVERY_EPOCH", 1, 1, 6),  # mid-epoch
        ("MANUAL_STEP", 1, 1, 5),
    ],
)
def test_scheduler_state_survives_resume(mode: str, k: int, frequency: int, stop: int) -> None:
    manual = [2, 4, 5, 10] if mode == "MANUAL_STEP" else []
    whole, _ = run(mode, k, frequency, manual_lr_steps=manual)
    _, first = run(mode, k, frequency, max_batches=stop, manual_lr_steps=manual)
    assert first.checkpoints[-1]["total_batches"] == stop
    resumed, result = run(
        mode, k, frequency, latest_checkpoint=first.checkpoints[-1]["path"], manual_lr_steps=manual
    )
    assert result.total_batches == N
    assert resumed.lrs == whole.lrs[stop:]
    assert resumed.recorder.weights == whole.recorder.weights[stop:]
    assert resumed.sched.last_epoch == whole.sched.last_epoch
    assert resumed.sched.get_last_lr() == whole.sched.get_last_lr()
    assert resumed.sched.state_dict() == whole.sched.state_dict()
    assert resumed.opt.param_groups[0]["lr"] == whole.opt.param_groups[0]["lr"]


# --- wrap_lr_scheduler errors ------------------------------------------------------------------


def _context_and_optimizer() -> Tuple[Any, torch.optim.Optimizer, Any]:
    cm = pytorch.init(hparams={"lr": LR0, "global_batch_size": 2}, exp_conf=SEED_CONF)
    ctx = cm.__enter__()
    model = ctx.wrap_model(torch.nn.Linear(1, 1))
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=LR0))
    return ctx, opt, cm


@pytest.mark.parametrize("mode", ["STEP_EVERY_BATCH", "STEP_EVERY_EPOCH", "STEP_EVERY_OPTIMIZER_STEP"])
def test_reduce_lr_on_plateau_needs_manual_step(mode: str) -> None:
    ctx, opt, cm = _context_and_optimizer()
    try:
        with pytest.raises(ValueError, match="MANUAL_STEP"):
            ctx.wrap_lr_scheduler(torch.optim.lr_scheduler.ReduceLROnPlateau(opt), LRScheduler.StepMode[mode])
        assert ctx.lr_schedulers == []
        wrapped = ctx.wrap_lr_scheduler(
            torch.optim.lr_scheduler.ReduceLROnPlateau(opt), LRScheduler.StepMode.MANUAL_STEP
        )
        assert ctx.lr_schedulers == [wrapped]
    finally:
        cm.__exit__(None, None, None)


def test_scheduler_on_unwrapped_optimizer_is_a_value_error() -> None:
    ctx, _, cm = _context_and_optimizer()
    try:
        other = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=LR0)
        with pytest.raises(ValueError, match="wrap_optimizer"):
            ctx.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(other, step_size=1),
                LRScheduler.StepMode.STEP_EVERY_BATCH,
            )
        assert ctx.lr_schedulers == []
    finally:
        cm.__exit__(None, None, None)


@pytest.mark.parametrize("bad", ["STEP_EVERY_BATCH", 2, None])
def test_step_mode_must_be_a_step_mode(bad: Any) -> None:
    ctx, opt, cm = _context_and_optimizer()
    try:
        with pytest.raises(TypeError, match="StepMode"):
            ctx.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(opt, step_size=1), bad)
    finally:
        cm.__exit__(None, None, None)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_frequency_must_be_a_positive_integer(bad: Any) -> None:
    ctx, opt, cm = _context_and_optimizer()
    try:
        with pytest.raises(ValueError, match="frequency"):
            ctx.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(opt, step_size=1),
                LRScheduler.StepMode.STEP_EVERY_BATCH,
                frequency=bad,
            )
    finally:
        cm.__exit__(None, None, None)
