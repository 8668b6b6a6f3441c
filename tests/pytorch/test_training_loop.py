"""The training loop, checked against hand-computed values of a one-weight linear model.

Model: y = w·x, MSE, SGD (tests/fixtures/linear.py). Training data x = 1..n, y = 2x, in order
(no shuffle), so batch b of epoch e holds a known slice and every weight is closed form.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.linear import LinearTrial, expected_weights
from tests.fixtures.loop_trials import CallbackStopTrial, LoopTrial, ValidationStopTrial

LR = 0.01
SEED_CONF = {"reproducibility": {"experiment_seed": 1}}
# A plain-Python run applies the retention policy (Determined's default keeps the best and the
# latest checkpoint); tests that open every checkpoint written keep them all.
KEEP_EVERY_CHECKPOINT = {"checkpoint_storage": {"save_trial_latest": 100}}


def run(
    trial_cls: Type[pytorch.PyTorchTrial] = LinearTrial,
    *,
    hparams: Optional[Dict[str, Any]] = None,
    exp_conf: Optional[Dict[str, Any]] = None,
    k: Optional[int] = None,
    **fit_kwargs: Any,
) -> Tuple[Any, pytorch.TrainResult]:
    hp = {"lr": LR, "global_batch_size": 2, **(hparams or {})}
    conf = {**SEED_CONF, **(exp_conf or {})}
    with pytorch.init(hparams=hp, exp_conf=conf, aggregation_frequency=k) as ctx:
        trial = trial_cls(ctx)
        result = pytorch.Trainer(trial, ctx).fit(**fit_kwargs)
    return trial, result


def xs(n_batches: int, dataset_size: int = 8, batch_size: int = 2) -> List[List[float]]:
    """The x values of the first ``n_batches`` training batches (in-order data, epoch after epoch)."""
    epoch = [
        [float(x) for x in range(start + 1, min(start + batch_size, dataset_size) + 1)]
        for start in range(0, dataset_size, batch_size)
    ]
    return [epoch[i % len(epoch)] for i in range(n_batches)]


def batch_loss(w: float, batch: Sequence[float]) -> float:
    return sum((w * x - 2 * x) ** 2 for x in batch) / len(batch)


def weights_before(w0: float, after: List[float]) -> List[float]:
    """Weight each batch trains with: w0, then the weight after the previous batch."""
    return [w0] + after[:-1]


def assert_close_seq(actual: Sequence[float], expected: Sequence[float]) -> None:
    assert len(actual) == len(expected), (actual, expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert math.isclose(a, e, rel_tol=1e-12, abs_tol=1e-15), (i, actual, expected)


def totals(records: List[Dict[str, Any]]) -> List[int]:
    return [r["total_batches"] for r in records]


# --- closed form ---------------------------------------------------------------------------


def test_explicit_aggregation_frequency_wins_over_the_config() -> None:
    trial, _ = run(k=1, exp_conf={"optimizations": {"aggregation_frequency": 3}}, max_length=pytorch.Batch(3))
    assert trial.context.harness.state.aggregation_frequency == 1
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(3), aggregation=1))


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("via", ["init", "exp_conf"])
def test_weights_after_every_batch_match_closed_form(k: int, via: str) -> None:
    # 12 batches of 4 per epoch: three epochs.
    if via == "init":
        trial, result = run(k=k, max_length=pytorch.Batch(12))
    else:
        trial, result = run(
            exp_conf={"optimizations": {"aggregation_frequency": k}}, max_length=pytorch.Batch(12)
        )
    assert trial.context.harness.state.aggregation_frequency == k
    expected = expected_weights(0.0, LR, xs(12), aggregation=k)
    assert_close_seq(trial.recorder.weights, expected)
    assert result.total_batches == 12
    if k == 3:
        # Weights move only on batches 3, 6, 9, 12 (1-based).
        w = [0.0] + trial.recorder.weights
        changed = [i for i in range(1, 13) if w[i] != w[i - 1]]
        assert changed == [3, 6, 9, 12]
        # First step: mean of the three batch gradients at w = 0: mean(-10, -50, -122).
        assert math.isclose(trial.recorder.weights[2], LR * (10 + 50 + 122) / 3, rel_tol=1e-12)


def test_unaveraged_aggregation_steps_with_the_sum_of_gradients() -> None:
    trial, _ = run(
        exp_conf={"optimizations": {"aggregation_frequency": 3, "average_aggregated_gradients": False}},
        max_length=pytorch.Batch(9),
    )
    # Summed gradients == averaged gradients with a k times larger learning rate.
    expected = expected_weights(0.0, 3 * LR, xs(9), aggregation=3)
    assert_close_seq(trial.recorder.weights, expected)
    assert math.isclose(trial.recorder.weights[2], LR * (10 + 50 + 122), rel_tol=1e-12)


def test_aggregation_given_both_in_init_and_exp_conf() -> None:
    # Both given and agreeing: k = 3 (not 9, not 1).
    trial, _ = run(k=3, exp_conf={"optimizations": {"aggregation_frequency": 3}}, max_length=pytorch.Batch(6))
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(6), aggregation=3))


# --- clip_grads and auto_zero_grads ------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_clip_grads_called_at_step_batches_with_the_parameters(k: int) -> None:
    clip = 1.0
    trial, _ = run(LoopTrial, hparams={"clip": clip}, k=k, max_length=pytorch.Batch(6))
    # Called once per optimizer step, on the step batches only.
    assert [c[0] for c in trial.clip_calls] == [i for i in range(6) if (i + 1) % k == 0]
    for _, params, _ in trial.clip_calls:
        assert len(params) == 1 and params[0] is trial.model.weight
    # Gradients seen by clip_grads are the aggregated mean; clipping then limits every step.
    w, acc, expected_w, expected_raw = 0.0, 0.0, [], []
    for i, batch in enumerate(xs(6)):
        acc += sum(2 * x * (w * x - 2 * x) for x in batch) / len(batch)
        if (i + 1) % k == 0:
            expected_raw.append(acc / k)
            w -= LR * max(-clip, min(clip, acc / k))
            acc = 0.0
        expected_w.append(w)
    assert_close_seq([c[2][0] for c in trial.clip_calls], expected_raw)
    assert all(abs(g) > clip for g in expected_raw)  # clipping really had an effect
    assert_close_seq(trial.recorder.weights, expected_w)


def test_auto_zero_grads_false_with_aggregation_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="aggregation_frequency"):
        run(LoopTrial, hparams={"auto_zero_grads": False}, k=3, max_length=pytorch.Batch(3))


def test_auto_zero_grads_false_accumulates_gradients_without_aggregation() -> None:
    trial, _ = run(LoopTrial, hparams={"auto_zero_grads": False}, max_length=pytorch.Batch(5))
    w, grad, expected = 0.0, 0.0, []
    for batch in xs(5):
        grad += sum(2 * x * (w * x - 2 * x) for x in batch) / len(batch)  # never zeroed
        w -= LR * grad
        expected.append(w)
    assert_close_seq(trial.recorder.weights, expected)


# --- training metrics and lengths ------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_training_metrics_are_averaged_over_each_reporting_period(k: int) -> None:
    trial, result = run(k=k, max_length=pytorch.Batch(6), reporting_period=pytorch.Batch(3))
    after = expected_weights(0.0, LR, xs(6), aggregation=k)
    before = weights_before(0.0, after)
    losses = [batch_loss(w, b) for w, b in zip(before, xs(6), strict=True)]
    assert totals(result.training_metrics) == [3, 6]
    for chunk, rec in enumerate(result.training_metrics):
        lo, hi = 3 * chunk, 3 * chunk + 3
        assert math.isclose(rec["metrics"]["loss"], sum(losses[lo:hi]) / 3, rel_tol=1e-12)
        assert math.isclose(rec["metrics"]["w"], sum(after[lo:hi]) / 3, rel_tol=1e-12)
    if k == 3:  # first chunk trains at w = 0 throughout: mean(10, 50, 122)
        assert math.isclose(result.training_metrics[0]["metrics"]["loss"], 182 / 3, rel_tol=1e-12)


def test_max_length_is_rounded_up_to_a_multiple_of_aggregation(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        trial, result = run(k=3, max_length=pytorch.Batch(7))
    assert result.total_batches == 9
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(9), aggregation=3))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("aggregation_frequency=3" in m and "9" in m for m in warnings), warnings
    assert totals(result.checkpoints) == [9]


def test_max_length_multiple_of_aggregation_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        _, result = run(k=3, max_length=pytorch.Batch(6))
    assert result.total_batches == 6
    assert not [r for r in caplog.records if "aggregation_frequency" in r.getMessage()]


@pytest.mark.parametrize("epochs, k, n", [(1, 1, 4), (2, 1, 8), (3, 3, 12), (2, 3, 9)])
def test_epoch_lengths(epochs: int, k: int, n: int) -> None:
    # Dataset of 10, batch 3 -> 4 batches per epoch ([1,2,3] [4,5,6] [7,8,9] [10]).
    trial, result = run(
        hparams={"dataset_size": 10, "global_batch_size": 3}, k=k, max_length=pytorch.Epoch(epochs)
    )
    assert result.total_batches == n
    expected = expected_weights(0.0, LR, xs(n, dataset_size=10, batch_size=3), aggregation=k)
    assert_close_seq(trial.recorder.weights, expected)


def test_test_mode_trains_two_steps_validates_two_batches_and_checkpoints_once() -> None:
    # Issue 16, item 4: --test runs what the real run depends on twice (it ran one batch of each
    # before, so a metric that changes between batches passed --test).
    trial, result = run(
        max_length=pytorch.Batch(50),
        validation_period=pytorch.Batch(1),
        checkpoint_period=pytorch.Batch(1),
        test_mode=True,
    )
    assert result.total_batches == 2
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(2)))
    w = trial.recorder.weights[-1]
    # One validation, on the first two validation batches only (x = 1..4), not all 5 records.
    assert totals(result.validation_metrics) == [2]
    val_loss = result.validation_metrics[0]["metrics"]["val_loss"]
    assert math.isclose(val_loss, sum((w * x - 2 * x) ** 2 for x in range(1, 5)) / 4, rel_tol=1e-12)
    assert totals(result.checkpoints) == [2]
    assert os.path.isfile(os.path.join(result.checkpoints[0]["path"], "state_dict.pth"))


def test_test_mode_with_aggregation_completes_two_optimizer_steps() -> None:
    trial, result = run(k=3, max_length=pytorch.Batch(50), test_mode=True)
    assert result.total_batches == 6
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(6), aggregation=3))
    assert trial.recorder.weights[-1] != 0.0
    assert totals(result.validation_metrics) == [6]
    assert totals(result.checkpoints) == [6]


class _ShapeChangingTrial(LinearTrial):
    """Its validation metric is a scalar on the first batch, a vector on the second."""

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        self.calls = getattr(self, "calls", 0) + 1
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        return {"val_loss": loss if self.calls == 1 else loss.repeat(3)}


def test_test_mode_catches_a_metric_whose_shape_changes_between_batches() -> None:
    with pytest.raises(Exception, match="val_loss"):
        run(_ShapeChangingTrial, max_length=pytorch.Batch(50), test_mode=True)


# --- validation and checkpoint periods ---------------------------------------------------------


def test_batch_periods() -> None:
    _, result = run(
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Batch(4),
        checkpoint_period=pytorch.Batch(3),
        checkpoint_policy="none",
    )
    assert totals(result.validation_metrics) == [4, 8, 10]
    assert totals(result.checkpoints) == [3, 6, 9, 10]


def test_epoch_periods() -> None:
    # 8 records, batch 2 -> 4 batches per epoch.
    _, result = run(
        max_length=pytorch.Epoch(3),
        validation_period=pytorch.Epoch(1),
        checkpoint_period=pytorch.Epoch(2),
        checkpoint_policy="none",
    )
    assert totals(result.validation_metrics) == [4, 8, 12]
    assert totals(result.checkpoints) == [8, 12]


def test_checkpoints_wait_for_the_optimizer_step_boundary() -> None:
    # Checkpoint due at 4 and 8, but k = 3: written at 6 and 9 (never mid-window); end at 12.
    _, result = run(
        k=3,
        exp_conf=KEEP_EVERY_CHECKPOINT,
        max_length=pytorch.Batch(12),
        checkpoint_period=pytorch.Batch(4),
        checkpoint_policy="none",
    )
    assert totals(result.checkpoints) == [6, 9, 12]
    for ckpt in result.checkpoints:
        with open(os.path.join(ckpt["path"], "metadata.json")) as f:
            assert json.load(f)["total_batches"] == ckpt["total_batches"]


def test_validation_metrics_are_hand_computable() -> None:
    trial, result = run(max_length=pytorch.Batch(4), validation_period=pytorch.Batch(2))
    w = trial.recorder.weights
    records = [1.0, 2.0, 3.0, 4.0, 5.0]  # val_size 5; AVG is weighted by records
    for rec, weight in zip(result.validation_metrics, [w[1], w[3]], strict=True):
        expected = sum((weight * x - 2 * x) ** 2 for x in records) / len(records)
        assert math.isclose(rec["metrics"]["val_loss"], expected, rel_tol=1e-12)
        # abs_err_max is also reduced by Reducer.AVG: per-batch maxima (x = 2, 4, 5), weighted 2:2:1.
        expected_max = abs(weight - 2) * (2 * 2 + 4 * 2 + 5 * 1) / 5
        assert math.isclose(rec["metrics"]["abs_err_max"], expected_max, rel_tol=1e-12)


@pytest.mark.parametrize(
    "policy, smaller_is_better, expected",
    [
        ("all", True, [2, 4, 6, 8]),
        ("best", True, [2, 4, 8]),
        ("best", False, [2, 8]),
        ("none", True, [8]),
    ],
)
def test_checkpoint_policy(policy: str, smaller_is_better: bool, expected: List[int]) -> None:
    val_seq = [3.0, 1.0, 2.0, 0.5]  # the val_loss of the validations at batches 2, 4, 6, 8
    _, result = run(
        LoopTrial,
        hparams={"val_seq": val_seq, "val_size": 2, "val_batch_size": 2},
        exp_conf={
            "searcher": {"metric": "val_loss", "smaller_is_better": smaller_is_better},
            **KEEP_EVERY_CHECKPOINT,
        },
        max_length=pytorch.Batch(8),
        validation_period=pytorch.Batch(2),
        checkpoint_policy=policy,
    )
    assert [r["metrics"]["val_loss"] for r in result.validation_metrics] == val_seq
    assert totals(result.validation_metrics) == [2, 4, 6, 8]
    assert totals(result.checkpoints) == expected
    by_batch = dict(zip([2, 4, 6, 8], val_seq, strict=True))
    for ckpt in result.checkpoints:
        assert ckpt["metrics"]["val_loss"] == by_batch[ckpt["total_batches"]]
        assert os.path.isdir(ckpt["path"])
    assert result.best_validation == (0.5 if smaller_is_better else 3.0)


def test_without_a_searcher_metric_best_checkpoints_after_every_validation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Determined's local mode (Trainer.fit from plain Python) needs no searcher metric; the
    # default checkpoint_policy then falls back to "all" without a word (issue 29 item 9: a
    # warning only when "best" is passed, tests/experiment/test_local.py).
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        _, result = run(max_length=pytorch.Batch(6), validation_period=pytorch.Batch(2))
    assert totals(result.validation_metrics) == [2, 4, 6]
    assert totals(result.checkpoints) == [2, 4, 6]
    assert result.best_validation is None
    assert "checkpoint_policy='best' needs a searcher metric" not in caplog.text
    _, result = run(max_length=pytorch.Batch(6), validation_period=pytorch.Batch(2), checkpoint_policy="none")
    assert totals(result.checkpoints) == [6]


def test_step_zero_validation_validates_before_training() -> None:
    trial, result = run(max_length=pytorch.Batch(4), step_zero_validation=True)
    assert totals(result.validation_metrics) == [0, 4]
    # At w = 0: per-record (2x)², records 1..5 -> 4·(1+4+9+16+25)/5 = 44.
    assert result.validation_metrics[0]["metrics"]["val_loss"] == 44.0
    assert result.validation_metrics[0]["metrics"]["abs_err_max"] == (4 * 2 + 8 * 2 + 10) / 5
    w = trial.recorder.weights[-1]
    expected = sum((w * x - 2 * x) ** 2 for x in range(1, 6)) / 5
    assert math.isclose(result.validation_metrics[1]["metrics"]["val_loss"], expected, rel_tol=1e-12)


def test_no_step_zero_validation_by_default() -> None:
    _, result = run(max_length=pytorch.Batch(4))
    assert totals(result.validation_metrics) == [4]


# --- stopping ------------------------------------------------------------------------------


@pytest.mark.parametrize("k, stop_at, stop_done", [(1, 2, 3), (3, 3, 6), (3, 5, 6)])
def test_stop_requested_from_train_batch(k: int, stop_at: int, stop_done: int) -> None:
    trial, result = run(LoopTrial, hparams={"stop_at": stop_at}, k=k, max_length=pytorch.Batch(12))
    assert result.stopped_early is True
    assert result.total_batches == stop_done
    assert len(trial.recorder.weights) == stop_done
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(stop_done), aggregation=k))
    assert totals(result.checkpoints) == [stop_done]
    state = torch.load(os.path.join(result.checkpoints[-1]["path"], "state_dict.pth"), weights_only=False)
    saved_w = state["context"]["models_state_dict"][0]["weight"].item()
    assert saved_w == trial.recorder.weights[-1]


def test_stop_requested_from_a_callback() -> None:
    trial, result = run(CallbackStopTrial, hparams={"stop_at": 4}, max_length=pytorch.Batch(12))
    assert result.stopped_early is True
    assert result.total_batches == 5
    assert totals(result.checkpoints) == [5]
    assert len(trial.recorder.weights) == 5


def test_stop_requested_during_validation_stops_at_the_validated_batch() -> None:
    # Issue 16, item 7: a stop asked for in on_validation_end (early stopping) ends training at
    # the validated batch: no extra batch is trained and the final checkpoint is the validated
    # one. Before, batch 5 was trained and the checkpoint taken there.
    trial, result = run(
        ValidationStopTrial,
        hparams={"stop_after_validations": 1},
        max_length=pytorch.Batch(12),
        validation_period=pytorch.Batch(4),
    )
    assert result.stopped_early is True
    assert result.total_batches == 4
    assert len(trial.recorder.weights) == 4
    assert totals(result.validation_metrics) == [4]
    assert totals(result.checkpoints) == [4]
    with open(os.path.join(result.checkpoints[-1]["path"], "metadata.json")) as f:
        assert json.load(f)["validation_metrics"] == result.validation_metrics[-1]["metrics"]


@pytest.mark.parametrize("reporting, stop_done, reports", [(2, 3, [2, 3]), (4, 6, [4, 6])])
def test_should_stop_stops_at_the_next_optimizer_step_boundary(
    reporting: int, stop_done: int, reports: List[int]
) -> None:
    # fit(should_stop=...) is the external pause/kill request, polled when metrics are reported.
    # With k = 3 the report that sees it can fall mid-window (batch 2 or 4); training must then
    # stop at the next optimizer-step boundary (3 or 6), not at the next report that happens
    # to fall on a boundary (6 or 12).
    calls: List[int] = []

    def should_stop() -> bool:
        calls.append(1)
        return True

    trial, result = run(
        k=3,
        max_length=pytorch.Batch(24),
        reporting_period=pytorch.Batch(reporting),
        should_stop=should_stop,
    )
    assert calls  # it was polled
    assert result.stopped_early is True
    assert result.total_batches == stop_done
    assert totals(result.checkpoints) == [stop_done]
    assert totals(result.training_metrics) == reports
    expected = expected_weights(0.0, LR, xs(stop_done), aggregation=3)
    assert_close_seq(trial.recorder.weights, expected)


def test_should_stop_false_trains_to_the_end() -> None:
    _, result = run(
        k=3, max_length=pytorch.Batch(6), reporting_period=pytorch.Batch(2), should_stop=lambda: False
    )
    assert result.stopped_early is False
    assert result.total_batches == 6


def test_not_stopped_early_when_training_completes() -> None:
    _, result = run(LoopTrial, max_length=pytorch.Batch(3))
    assert result.stopped_early is False
    assert result.total_batches == 3


# --- epoch and batch information ------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_epoch_information_inside_train_batch(k: int) -> None:
    # Dataset of 10, batch 3 -> 4 batches per epoch; 12 batches = 3 epochs.
    trial, _ = run(
        LoopTrial,
        hparams={"dataset_size": 10, "global_batch_size": 3},
        k=k,
        max_length=pytorch.Batch(12),
    )
    expected = [(i, i // 4, i, i // 4, i % 4 == 0, i % 4 == 3) for i in range(12)]
    assert trial.log == expected


def test_epoch_information_after_resume() -> None:
    hp = {"dataset_size": 10, "global_batch_size": 3}
    _, first = run(LoopTrial, hparams=hp, max_length=pytorch.Batch(6))
    trial, _ = run(
        LoopTrial,
        hparams=hp,
        max_length=pytorch.Batch(9),
        latest_checkpoint=first.checkpoints[-1]["path"],
    )
    assert trial.log == [(i, i // 4, i, i // 4, i % 4 == 0, i % 4 == 3) for i in range(6, 9)]


def test_records_per_epoch_unlike_the_loader_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 12, item 12: LinearTrial's loader holds 8 records; the config says 10.
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        run(exp_conf={"records_per_epoch": 10}, max_length=pytorch.Batch(8))
        run(exp_conf={"records_per_epoch": 8}, max_length=pytorch.Batch(2))  # agrees: nothing said
    said = [r.getMessage() for r in caplog.records if "records_per_epoch" in r.getMessage()]
    assert said == [
        "records_per_epoch is 10 in the experiment config, but the training DataLoader holds 8 "
        "records; det-lite's epoch is one pass over the DataLoader (8 records), so lengths in "
        "epochs follow the DataLoader"
    ]
