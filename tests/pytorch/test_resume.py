"""Resume: a trial stopped at batch n and resumed from its checkpoint is bit-identical (CPU) to
one that never stopped: weights, optimizer and scheduler state, callback state, metrics, data
order and global RNG draws."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.resume_mlp import NUM_RECORDS, ResumeMLPTrial

# With k=2 and STEP_EVERY_BATCH the scheduler steps on batch 0, before the first optimizer step;
# that is the configured behaviour, and torch's warning about it is noise here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`:UserWarning"
)

EPOCH_LEN = 6  # 22 records, batch 4: five full batches and one of 2
assert -(-NUM_RECORDS // 4) == EPOCH_LEN


@pytest.fixture(autouse=True)
def _home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LITE_HOME", str(tmp_path / "home"))


def _run(
    max_batches: int,
    *,
    k: int = 1,
    mode: str = "STEP_EVERY_BATCH",
    reporting: int = 3,
    validation: Optional[int] = 4,
    checkpoint_period: Optional[int] = None,
    latest: Optional[str] = None,
    seed: int = 3,
    extra_hparams: Optional[Dict[str, Any]] = None,
    searcher_metric: Optional[str] = None,
) -> Tuple[ResumeMLPTrial, pytorch.TrainResult]:
    hparams = {"lr": 0.05, "global_batch_size": 4, "lr_step_mode": mode, **(extra_hparams or {})}
    # Every checkpoint stays (tests resume from earlier ones): a plain-Python run applies the
    # retention policy, whose default keeps only the best and the latest.
    exp_conf: Dict[str, Any] = {
        "reproducibility": {"experiment_seed": seed},
        "checkpoint_storage": {"save_trial_latest": 100},
    }
    if searcher_metric:
        exp_conf["searcher"] = {"metric": searcher_metric, "smaller_is_better": True}
    with pytorch.init(
        hparams=hparams,
        exp_conf=exp_conf,
        aggregation_frequency=k,
    ) as ctx:
        trial = ResumeMLPTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches),
            reporting_period=pytorch.Batch(reporting),
            validation_period=pytorch.Batch(validation) if validation else None,
            checkpoint_period=pytorch.Batch(checkpoint_period) if checkpoint_period else None,
            latest_checkpoint=latest,
        )
    return trial, result


def _assert_same_state(a: Any, b: Any, where: str) -> None:
    """Recursive equality; tensors must be bit-identical."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a)} vs {set(b)}"
        for key in a:
            _assert_same_state(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _assert_resumed_equals_full(
    full: ResumeMLPTrial,
    full_result: pytorch.TrainResult,
    resumed: ResumeMLPTrial,
    resumed_result: pytorch.TrainResult,
    n: int,
    total: int,
) -> None:
    # Weights (and buffers), bit for bit.
    full_params = dict(full.model.named_parameters())
    resumed_params = dict(resumed.model.named_parameters())
    assert list(full_params) == list(resumed_params)
    for name, p in full_params.items():
        assert torch.equal(p, resumed_params[name]), f"parameter {name} differs"
    _assert_same_state(full.model.state_dict(), resumed.model.state_dict(), "model")

    # Every optimizer state tensor (Adam: step, exp_avg, exp_avg_sq) and hyperparameters.
    full_opt, resumed_opt = full.opt.state_dict(), resumed.opt.state_dict()
    assert len(full_opt["state"]) == 4  # 4 parameter tensors, all with state
    for state in full_opt["state"].values():
        assert {"step", "exp_avg", "exp_avg_sq"} <= set(state)
    _assert_same_state(full_opt, resumed_opt, "optimizer")

    # LR scheduler.
    _assert_same_state(full.sched.state_dict(), resumed.sched.state_dict(), "lr_scheduler")
    assert full.sched.get_last_lr() == resumed.sched.get_last_lr()

    # The stateful callback: it was restored to n and counted on to the end.
    assert resumed.counter.loaded is not None
    assert resumed.counter.loaded["count"] == n
    assert resumed.counter.loaded["batch_idxs"] == list(range(n))
    assert full.counter.state_dict() == {"count": total, "batch_idxs": list(range(total))}
    assert resumed.counter.state_dict() == full.counter.state_dict()

    # Metrics reported after n.
    assert resumed_result.total_batches == full_result.total_batches == total
    later_training = [m for m in full_result.training_metrics if m["total_batches"] > n]
    assert later_training, "the uninterrupted run reported nothing after n"
    assert resumed_result.training_metrics == later_training
    later_validation = [m for m in full_result.validation_metrics if m["total_batches"] > n]
    assert later_validation
    assert resumed_result.validation_metrics == later_validation

    # Data order, learning rates and global RNG draws from batch n on.
    assert len(resumed.draws) == total - n
    assert resumed.seen == full.seen[n:]
    assert torch.equal(torch.cat(resumed.inputs), torch.cat(full.inputs[n:]))  # incl. augmentation
    assert resumed.lrs == full.lrs[n:]
    assert torch.equal(torch.cat(resumed.draws), torch.cat(full.draws[n:]))
    assert resumed.np_draws == full.np_draws[n:]
    assert resumed.py_draws == full.py_draws[n:]


def _check_partial_matches_full(
    partial: ResumeMLPTrial,
    partial_result: pytorch.TrainResult,
    full: ResumeMLPTrial,
    full_result: pytorch.TrainResult,
    n: int,
) -> str:
    """The run stopped at n saw the first n batches of the full run; returns its checkpoint."""
    assert partial_result.total_batches == n
    assert partial_result.checkpoints[-1]["total_batches"] == n
    assert partial.seen == full.seen[:n]
    assert torch.equal(torch.cat(partial.draws), torch.cat(full.draws[:n]))
    assert partial_result.training_metrics == [
        m for m in full_result.training_metrics if m["total_batches"] <= n
    ]
    return partial_result.checkpoints[-1]["path"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["STEP_EVERY_BATCH", "STEP_EVERY_EPOCH"])
def test_resume_mid_epoch_is_bit_identical(mode: str) -> None:
    n, total = 9, 16  # 9 is mid-epoch (epoch length 6); reporting every 3 divides 9
    full, full_result = _run(total, mode=mode)
    partial, partial_result = _run(n, mode=mode)
    ckpt = _check_partial_matches_full(partial, partial_result, full, full_result, n)

    resumed, resumed_result = _run(total, mode=mode, latest=ckpt)
    _assert_resumed_equals_full(full, full_result, resumed, resumed_result, n, total)
    # The data really was shuffled and differs between epochs (so skipping to n matters).
    assert full.seen[:EPOCH_LEN] != full.seen[EPOCH_LEN : 2 * EPOCH_LEN]
    assert sorted(i for b in full.seen[:EPOCH_LEN] for i in b) == list(range(NUM_RECORDS))
    # The scheduler really stepped as configured.
    expected_steps = total if mode == "STEP_EVERY_BATCH" else total // EPOCH_LEN
    assert full.sched.state_dict()["last_epoch"] == expected_steps


@pytest.mark.slow
def test_validation_does_not_move_the_training_rng() -> None:
    # The run stopped at n validates at its end (the uninterrupted run does not, at n); with
    # an evaluate_batch that draws from the global RNG, resume is still bit-identical, and
    # validating more often leaves training untouched.
    n, total = 9, 16
    hp = {"val_draws": True}
    full, full_result = _run(total, extra_hparams=hp)
    partial, partial_result = _run(n, extra_hparams=hp)
    ckpt = _check_partial_matches_full(partial, partial_result, full, full_result, n)
    resumed, resumed_result = _run(total, latest=ckpt, extra_hparams=hp)
    _assert_resumed_equals_full(full, full_result, resumed, resumed_result, n, total)
    assert all("val_noise" in m["metrics"] for m in full_result.validation_metrics)

    often, _ = _run(total, validation=1, extra_hparams=hp)
    assert torch.equal(torch.cat(often.draws), torch.cat(full.draws))
    for name, p in full.model.named_parameters():
        assert torch.equal(p, dict(often.model.named_parameters())[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["STEP_EVERY_BATCH", "STEP_EVERY_EPOCH"])
def test_resume_with_aggregation_frequency_2(mode: str) -> None:
    n, total = 8, 16  # 8: mid-epoch and an optimizer-step boundary; reporting every 4 divides 8
    full, full_result = _run(total, k=2, mode=mode, reporting=4)
    partial, partial_result = _run(n, k=2, mode=mode, reporting=4)
    ckpt = _check_partial_matches_full(partial, partial_result, full, full_result, n)

    resumed, resumed_result = _run(total, k=2, mode=mode, reporting=4, latest=ckpt)
    _assert_resumed_equals_full(full, full_result, resumed, resumed_result, n, total)
    # 8 optimizer steps in 16 batches.
    for state in full.opt.state_dict()["state"].values():
        assert float(state["step"]) == total / 2


@pytest.mark.slow
def test_resume_twice() -> None:
    n1, n2, total = 5, 11, 16
    full, full_result = _run(total, reporting=1)
    first, first_result = _run(n1, reporting=1)
    ckpt1 = _check_partial_matches_full(first, first_result, full, full_result, n1)

    second, second_result = _run(n2, reporting=1, latest=ckpt1)
    assert second_result.total_batches == n2
    assert second.seen == full.seen[n1:n2]
    assert torch.equal(torch.cat(second.draws), torch.cat(full.draws[n1:n2]))
    assert second.counter.loaded == {"count": n1, "batch_idxs": list(range(n1))}
    assert second_result.training_metrics == [
        m for m in full_result.training_metrics if n1 < m["total_batches"] <= n2
    ]
    ckpt2 = second_result.checkpoints[-1]["path"]
    assert ckpt2 != ckpt1

    third, third_result = _run(total, reporting=1, latest=ckpt2)
    _assert_resumed_equals_full(full, full_result, third, third_result, n2, total)


@pytest.mark.slow
def test_resume_restores_the_saved_trial_seed() -> None:
    """The data order and RNG streams follow the checkpoint, not the seed given to init()."""
    n, total = 9, 16
    full, full_result = _run(total)
    _, partial_result = _run(n)
    resumed, resumed_result = _run(total, latest=partial_result.checkpoints[-1]["path"], seed=4)
    _assert_resumed_equals_full(full, full_result, resumed, resumed_result, n, total)
    # Control: seed 4 from scratch really gives another run.
    other, _ = _run(total, seed=4)
    assert other.seen != full.seen


@pytest.mark.slow
def test_resume_keeps_best_validation_for_checkpoint_policy() -> None:
    """checkpoint_policy="best" after resume compares with the best value seen before it."""
    n, total = 12, 30
    kwargs: Dict[str, Any] = dict(reporting=3, validation=3, searcher_metric="val_loss")
    full, full_result = _run(total, **kwargs)
    vals = [v["metrics"]["val_loss"] for v in full_result.validation_metrics]
    best_before = min(vals[: n // 3])
    # Meaningful only if the first validation after n is no improvement on the best before n
    # (a resumed run that forgot the best would checkpoint there).
    assert vals[n // 3] > best_before
    _, partial_result = _run(n, **kwargs)
    resumed, resumed_result = _run(total, latest=partial_result.checkpoints[-1]["path"], **kwargs)
    _assert_resumed_equals_full(full, full_result, resumed, resumed_result, n, total)
    assert resumed_result.best_validation == full_result.best_validation
    assert [(c["total_batches"], c["metrics"]) for c in resumed_result.checkpoints] == [
        (c["total_batches"], c["metrics"]) for c in full_result.checkpoints if c["total_batches"] > n
    ]


@pytest.mark.slow
def test_checkpoint_waits_for_optimizer_step_boundary() -> None:
    trial, result = _run(8, k=2, reporting=100, validation=None, checkpoint_period=3)
    # Due at 3 (mid-window) -> written at 4; due at 6 (a boundary) -> 6; end -> 8.
    assert [c["total_batches"] for c in result.checkpoints] == [4, 6, 8]
    first = result.checkpoints[0]["path"]
    with open(os.path.join(first, "metadata.json")) as f:
        assert json.load(f)["total_batches"] == 4

    # Resuming from it continues at batch 4 and matches the uninterrupted run.
    resumed, resumed_result = _run(8, k=2, reporting=100, validation=None, latest=first)
    assert resumed.counter.loaded == {"count": 4, "batch_idxs": [0, 1, 2, 3]}
    assert resumed.seen == trial.seen[4:]
    for name, p in trial.model.named_parameters():
        assert torch.equal(p, dict(resumed.model.named_parameters())[name]), name
    _assert_same_state(trial.opt.state_dict(), resumed.opt.state_dict(), "optimizer")


def test_resume_with_different_number_of_models_fails() -> None:
    _, result = _run(4, validation=None)
    ckpt = result.checkpoints[-1]["path"]
    with pytest.raises(ValueError, match=r"1 entries in 'models_state_dict' but the trial wrapped 2"):
        _run(8, validation=None, latest=ckpt, extra_hparams={"extra_model": True})
