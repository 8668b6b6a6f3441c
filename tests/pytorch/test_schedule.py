"""The loop's schedule as pure functions: the plan in batches and the end-of-batch decisions."""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

import pytest

from determined_lite.config import Batch, CheckpointPolicy, Epoch, Record
from determined_lite.pytorch._schedule import (
    Decision,
    Plan,
    TrainingState,
    decide,
    is_better,
    is_step_batch,
    quiet_until,
)


def _plan(**kwargs) -> Plan:
    args = dict(
        max_length=Batch(10),
        epoch_length=4,
        aggregation_frequency=1,
        global_batch_size=lambda: pytest.fail("global batch size asked for without a length in records"),
    )
    args.update(kwargs)
    return Plan.build(**args)


def test_plan_converts_every_unit_to_batches() -> None:
    plan = _plan(
        max_length=Epoch(3),
        validation_period=Record(10),
        checkpoint_period=Epoch(1),
        reporting_period=Batch(5),
        global_batch_size=lambda: 4,
    )
    assert (plan.max_batches, plan.requested_batches) == (12, 12)
    assert (plan.validation_every, plan.checkpoint_every, plan.report_every) == (3, 4, 5)


def test_plan_rounds_max_length_up_to_whole_optimizer_steps() -> None:
    plan = _plan(max_length=Batch(10), aggregation_frequency=4)
    assert (plan.requested_batches, plan.max_batches) == (10, 12)


def test_test_mode_plans_two_optimizer_steps_and_no_periodic_workloads() -> None:
    plan = _plan(
        aggregation_frequency=3, validation_period=Batch(1), checkpoint_period=Batch(1), test_mode=True
    )
    assert plan.max_batches == 6
    assert plan.validation_every is None and plan.checkpoint_every is None


def test_a_period_shorter_than_a_batch_is_one_batch() -> None:
    assert _plan(validation_period=Record(1), global_batch_size=lambda: 8).validation_every == 1


def test_step_batches_end_each_aggregation_window() -> None:
    assert [i for i in range(9) if is_step_batch(i, 3)] == [2, 5, 8]
    state = TrainingState(aggregation_frequency=2, batch_idx=3, epoch_length=2)
    assert state.is_step_batch() and state.epoch == 1
    with pytest.raises(RuntimeError, match="Training hasn.t started"):
        _ = TrainingState().epoch


def _run(plan: Plan, improved: Tuple[bool, ...] = (), stop_at: Optional[int] = None) -> List[Tuple[int, str]]:
    """Drive decide() as the loop does; returns (batch, action) for every action taken."""
    actions: List[Tuple[int, str]] = []
    pending, outcomes = False, list(improved)
    for done in range(1, plan.max_batches + 1):
        stop = stop_at is not None and done >= stop_at
        d = decide(plan, done, checkpoint_pending=pending, stop=stop)
        if d.report:
            actions.append((done, "report"))
        pending = d.checkpoint_pending
        if d.validate:
            actions.append((done, "validate"))
            better = outcomes.pop(0) if outcomes else False
            pending = d.checkpoint_after_validation(plan.checkpoint_policy, better)
        if d.checkpoint_now(pending, stop):
            actions.append((done, "checkpoint"))
            pending = False
        if d.stop_now(stop):
            actions.append((done, "end" if d.end else "stop"))
            break
    return actions


def test_end_of_training_reports_validates_and_checkpoints_once() -> None:
    assert _run(_plan(max_length=Batch(3))) == [(3, "report"), (3, "validate"), (3, "checkpoint"), (3, "end")]


def test_a_checkpoint_asked_off_a_boundary_waits_for_the_next_optimizer_step() -> None:
    plan = _plan(max_length=Batch(8), aggregation_frequency=3, checkpoint_period=Batch(4))
    # due at 4 (mid-window), taken at 6 with a report; then the end at 9 (8 rounded up to 3s)
    assert _run(plan) == [
        (6, "report"),
        (6, "checkpoint"),
        (9, "report"),
        (9, "validate"),
        (9, "checkpoint"),
        (9, "end"),
    ]


@pytest.mark.parametrize(
    "policy, improved, checkpoints",
    [
        (CheckpointPolicy.BEST, (True, False, True), [2, 6]),
        (CheckpointPolicy.ALL, (False, False, False), [2, 4, 6]),
        (CheckpointPolicy.NONE, (True, True, True), [6]),
    ],
)
def test_checkpoint_policy_after_validations(policy, improved, checkpoints) -> None:
    plan = _plan(max_length=Batch(6), validation_period=Batch(2), checkpoint_policy=policy)
    taken = [b for b, a in _run(plan, improved) if a == "checkpoint"]
    # the end always checkpoints, once, even when its validation asked for one too
    assert taken == checkpoints


def test_a_stop_is_honoured_at_the_next_boundary_with_a_report_and_a_checkpoint() -> None:
    plan = _plan(max_length=Batch(20), aggregation_frequency=4, reporting_period=None)
    assert _run(plan, stop_at=5) == [(8, "report"), (8, "checkpoint"), (8, "stop")]


@pytest.mark.parametrize(
    "periods",
    [
        {},
        {"validation_period": Batch(7)},
        {"validation_period": Batch(5), "checkpoint_period": Batch(3), "reporting_period": Batch(4)},
        {"reporting_period": None, "checkpoint_period": Epoch(1)},
    ],
)
@pytest.mark.parametrize("k", [1, 3])
def test_the_loop_skips_only_batches_where_nothing_is_decided(periods, k) -> None:
    # Issue 27: the loop asks decide() only from quiet_until() on (nothing pending or asked);
    # every batch it skips would have been all False, and the one it stops at is not.
    plan = _plan(max_length=Batch(40), aggregation_frequency=k, **periods)
    nothing = Decision(end=False, boundary=True, report=False, validate=False, checkpoint_pending=False)
    done = 0
    while done < plan.max_batches:
        until = quiet_until(plan, done)
        assert done < until <= plan.max_batches
        for skipped in range(done + 1, until):
            d = decide(plan, skipped, checkpoint_pending=False, stop=False)
            assert dataclasses.replace(d, boundary=True) == nothing, (skipped, d)
        d = decide(plan, until, checkpoint_pending=False, stop=False)
        assert d.end or d.report or d.validate or d.checkpoint_pending, (until, d)
        done = until
    assert quiet_until(plan, plan.max_batches) == plan.max_batches + 1  # a longer run decides on


def test_decision_is_a_value() -> None:
    d = decide(_plan(reporting_period=Batch(3)), 3, checkpoint_pending=False, stop=False)
    assert d == Decision(end=False, boundary=True, report=True, validate=False, checkpoint_pending=False)


def test_better_metric_ignores_nan_in_either_place() -> None:
    assert is_better(1.0, None, smaller_is_better=True)
    assert is_better(0.5, 1.0, smaller_is_better=True) and not is_better(2.0, 1.0, smaller_is_better=True)
    assert is_better(2.0, 1.0, smaller_is_better=False)
    assert not is_better(math.nan, None, smaller_is_better=True)
    assert is_better(3.0, math.nan, smaller_is_better=True)
