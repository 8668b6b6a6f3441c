"""Distributed training through the real launcher, for every engine: 2 workers vs 1 slot.

The model is the one-weight closed form of ``tests/fixtures/linear.py`` (x = i + 1, y = 2x, MSE,
SGD): the weight after every optimizer step is computed by hand from the records of each global
batch (``expected_weights``). Runs (each a few seconds, shared between tests per engine):

- ``main``: 2 workers, aggregation_frequency 1, 8 batches of 12 shuffled records with global batch
  4 (epochs of 3 batches), checkpoints every 2 batches, validation every 4 on 11 records in
  batches of 2 (11 is not a multiple of slots × batch);
- ``aggregated``: 2 workers, aggregation_frequency 2, validation with ``evaluate_full_dataset``;
- ``resumed``: ``main`` resumed from its checkpoint at batch 4 (mid-epoch);
- ``single_k1``/``single_k2``: the same trials on 1 slot (backend ``single``), global batch 4;
- two failing runs per engine: one worker raises, one worker is SIGKILLed.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from tests.distributed._helpers import (
    BACKENDS,
    MAX_BATCHES,
    SLOTS,
    TINY_HP,
    Run,
    describe,
    global_batches,
    processes_mentioning,
    run,
    weights,
)
from tests.fixtures.dist_trials import FAIL_MESSAGE
from tests.fixtures.linear import expected_weights

HP: Dict[str, Any] = {**TINY_HP, "val_size": 11, "val_batch_size": 2, "shuffle": True}
LINEAR = "dist_trials:DistLinearTrial"
FULL_EVAL = "dist_trials:FullEvalTrial"
VAL_XS = [float(i + 1) for i in range(HP["val_size"])]  # validation records x = id + 1


def exp_conf(aggregation_frequency: int = 1) -> Dict[str, Any]:
    return {
        "min_checkpoint_period": {"batches": 2},
        "min_validation_period": {"batches": 4},
        "scheduling_unit": 2,
        "optimizations": {"aggregation_frequency": aggregation_frequency},
    }


def approx(value: Any) -> Any:
    return pytest.approx(value, rel=1e-12, abs=1e-12)


# Module fixtures start several runs inside the first test that needs them; each run has its
# own hang timeout (tests/distributed/_helpers.py).
pytestmark = pytest.mark.timeout(900)

# --- runs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_k1(tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run("single", 1, LINEAR, HP, exp_conf(1), MAX_BATCHES, tmp_path_factory.mktemp("single_k1"))
    assert r.code == 0, describe(r)
    return r


@pytest.fixture(scope="module")
def single_k2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run("single", 1, FULL_EVAL, HP, exp_conf(2), MAX_BATCHES, tmp_path_factory.mktemp("single_k2"))
    assert r.code == 0, describe(r)
    return r


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def main_run(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run(backend, SLOTS, LINEAR, HP, exp_conf(1), MAX_BATCHES, tmp_path_factory.mktemp(f"main_{backend}"))
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


@pytest.fixture(scope="module")
def aggregated_run(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run(
        backend, SLOTS, FULL_EVAL, HP, exp_conf(2), MAX_BATCHES, tmp_path_factory.mktemp(f"agg_{backend}")
    )
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


@pytest.fixture(scope="module")
def resumed_run(backend: str, main_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Run:
    (ckpt,) = [c for c in main_run.result.checkpoints if c["total_batches"] == 4]
    r = run(
        backend,
        SLOTS,
        LINEAR,
        HP,
        exp_conf(1),
        MAX_BATCHES,
        tmp_path_factory.mktemp(f"resumed_{backend}"),
        latest_checkpoint=ckpt["path"],
    )
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


# --- 1. gradients: closed form and equality with one slot ---------------------------------------


@pytest.mark.parametrize("k", [1, 2])
def test_weights_follow_the_closed_form_and_the_single_slot_run(
    k: int, main_run: Run, aggregated_run: Run, single_k1: Run, single_k2: Run
) -> None:
    multi, single = (main_run, single_k1) if k == 1 else (aggregated_run, single_k2)
    batches = global_batches(multi, SLOTS)
    assert len(batches) == MAX_BATCHES and all(len(b) == HP["global_batch_size"] for b in batches)
    # The 2 workers together saw exactly the global batches of the 1-slot run.
    assert batches == global_batches(single, 1)
    # Every rank holds the same weight after every batch: DDP/allreduce averaged the gradients.
    assert weights(multi, 0) == weights(multi, 1)
    expected = expected_weights(HP["w0"], HP["lr"], batches, aggregation=k)
    assert weights(multi, 0) == approx(expected)
    assert weights(multi, 0) == approx(weights(single, 0))
    # Weights move only on optimizer steps.
    if k == 2:
        w = weights(multi, 0)
        assert [w[i] for i in range(0, MAX_BATCHES, 2)] == [HP["w0"]] + [
            w[i] for i in range(1, MAX_BATCHES - 1, 2)
        ]


def test_training_metrics_are_averaged_over_workers_on_every_rank(main_run: Run, single_k1: Run) -> None:
    per_rank = [[r["metrics"] for r in main_run.of_kind("train", rank)] for rank in range(SLOTS)]
    # Callbacks on every rank get the same reduced metrics, one report per 2-batch chunk.
    assert per_rank[0] == per_rank[1]
    assert [r["batches"] for r in main_run.of_kind("train", 1)] == [2, 2, 2, 2]
    # "rank" is each worker's own rank: its mean over workers is (0 + 1) / 2.
    assert [m["rank"] for m in per_rank[0]] == [0.5] * 4
    # Each worker's loss is the mean over half of the global batch; averaged over both workers
    # it is the single slot's loss over the whole batch.
    single = [r["metrics"] for r in single_k1.of_kind("train", 0)]
    assert [m["loss"] for m in per_rank[0]] == approx([m["loss"] for m in single])
    assert [m["w"] for m in per_rank[0]] == approx([m["w"] for m in single])


def test_per_batch_training_metrics_are_averaged_over_workers(main_run: Run, single_k1: Run) -> None:
    # Determined averages every batch's training metrics over the workers at report time
    # (optimizations.average_training_metrics, default true): callbacks see no worker's own values.
    per_rank = [[r["batch_metrics"] for r in main_run.of_kind("train", rank)] for rank in range(SLOTS)]
    assert per_rank[0] == per_rank[1]
    chief = [m for chunk in per_rank[0] for m in chunk]
    assert [m["rank"] for m in chief] == [0.5] * MAX_BATCHES
    single = [m for r in single_k1.of_kind("train", 0) for m in r["batch_metrics"]]
    assert [m["loss"] for m in chief] == approx([m["loss"] for m in single])
    assert [m["w"] for m in chief] == approx(weights(single_k1, 0))
    for report, batch in zip(main_run.of_kind("train", 0), per_rank[0]):
        assert report["metrics"]["loss"] == approx(sum(m["loss"] for m in batch) / len(batch))


@pytest.fixture(scope="module")
def chief_only_run(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    conf = {"scheduling_unit": 2, "optimizations": {"average_training_metrics": False}}
    r = run(backend, SLOTS, LINEAR, HP, conf, 4, tmp_path_factory.mktemp(f"chief_only_{backend}"))
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


def test_average_training_metrics_false_reports_the_chiefs_own_metrics(chief_only_run: Run) -> None:
    # As in the Determined versions that read the field: only the chief's metrics are reported.
    for rank in range(SLOTS):
        train = chief_only_run.of_kind("train", rank)
        assert [r["metrics"]["rank"] for r in train] == [0.0, 0.0]
        assert [m["rank"] for r in train for m in r["batch_metrics"]] == [0.0] * 4


# --- 2. validation ------------------------------------------------------------------------------


def test_validation_sees_every_record_exactly_once(main_run: Run) -> None:
    ids = {rank: [i for r in main_run.of_kind("val_batch", rank) for i in r["ids"]] for rank in range(SLOTS)}
    n = HP["val_size"]
    # Two validations (batches 4 and 8); within each, the ranks split the records without overlap.
    for rank in range(SLOTS):
        assert len(ids[rank]) % 2 == 0
    first = [ids[rank][: len(ids[rank]) // 2] for rank in range(SLOTS)]
    assert first[0] + first[1] == list(range(n))
    assert first[0] == list(range(6)) and first[1] == list(range(6, n))  # contiguous shares


def test_validation_metrics_equal_the_single_slot_run(main_run: Run, single_k1: Run) -> None:
    per_rank = [[r["metrics"] for r in main_run.of_kind("val", rank)] for rank in range(SLOTS)]
    assert len(per_rank[0]) == 2 and per_rank[0] == per_rank[1]
    single = [r["metrics"] for r in single_k1.of_kind("val", 0)]
    n = len(VAL_XS)
    for multi_m, single_m in zip(per_rank[0], single):
        assert sorted(multi_m) == sorted(single_m)
        # AVG is sample-weighted: the true mean of 1..11 (batch-weighted would be 38.5 / 6).
        assert multi_m["x_avg"] == single_m["x_avg"] == sum(VAL_XS) / n == 6.0
        assert multi_m["x_sum"] == single_m["x_sum"] == 66.0
        assert multi_m["x_max"] == single_m["x_max"] == 11.0
        assert multi_m["mr_mean"] == single_m["mr_mean"] == 6.0  # MetricReducer
        # Function reducer: order-sensitive Σ (position + 1)·value = Σ k² for values in record order.
        assert multi_m["fn_weighted"] == single_m["fn_weighted"] == sum(x * x for x in VAL_XS) == 506.0
        assert multi_m["val_loss"] == approx(single_m["val_loss"])
    assert main_run.result.validation_metrics == per_rank[0][-1]


def test_function_reducer_sees_values_in_record_order_on_every_rank(main_run: Run) -> None:
    for rank in range(SLOTS):
        seen = [r["values"] for r in main_run.of_kind("fn_order", rank)]
        assert seen == [VAL_XS, VAL_XS]


def test_evaluate_full_dataset_runs_on_the_chief_and_reaches_every_rank(
    aggregated_run: Run, single_k2: Run
) -> None:
    expected = {"x_sum": 66.0, "n": 11, "evaluated_on_rank": 0}
    for rank in range(SLOTS):
        assert [r["metrics"] for r in aggregated_run.of_kind("val", rank)] == [expected, expected]
    assert [r["n"] for r in aggregated_run.of_kind("full_eval", 0)] == [11, 11]
    assert aggregated_run.of_kind("full_eval", 1) == []
    assert [r["metrics"] for r in single_k2.of_kind("val", 0)] == [expected, expected]


# --- 3. resume ----------------------------------------------------------------------------------


def test_resume_mid_epoch_is_bit_identical(main_run: Run, resumed_run: Run) -> None:
    for rank in range(SLOTS):
        # Resumed at batch 4 (epoch 1, batch 1 of 3): same records, bit-identical weights.
        assert [r["batch_idx"] for r in resumed_run.of_kind("batch", rank)] == [4, 5, 6, 7]
        resumed = {r["batch_idx"]: r for r in resumed_run.of_kind("batch", rank)}
        original = {r["batch_idx"]: r for r in main_run.of_kind("batch", rank)}
        for idx in range(4, MAX_BATCHES):
            assert resumed[idx]["xs"] == original[idx]["xs"]
            assert resumed[idx]["w"] == original[idx]["w"]
        assert [r["metrics"] for r in resumed_run.of_kind("train", rank)] == [
            r["metrics"] for r in main_run.of_kind("train", rank)[2:]
        ]
        assert [r["metrics"] for r in resumed_run.of_kind("val", rank)] == [
            r["metrics"] for r in main_run.of_kind("val", rank)[1:]
        ]
    assert resumed_run.result.validation_metrics == main_run.result.validation_metrics
    assert resumed_run.result.total_batches == MAX_BATCHES


# --- 5. checkpoints -----------------------------------------------------------------------------


def test_only_the_chief_writes_checkpoints(main_run: Run) -> None:
    ckpts = main_run.result.checkpoints
    assert [c["total_batches"] for c in ckpts] == [2, 4, 6, 8]
    # One directory per checkpoint, nothing else (no second writer, no leftover temporary).
    assert sorted(os.listdir(main_run.checkpoint_root)) == sorted(c["uuid"] for c in ckpts)
    assert [r["path"] for r in main_run.of_kind("ckpt_write", 0)] == [c["path"] for c in ckpts]
    assert main_run.of_kind("ckpt_write", 1) == []


def test_every_rank_loads_the_checkpoint_on_resume(main_run: Run, resumed_run: Run) -> None:
    (ckpt,) = [c for c in main_run.result.checkpoints if c["total_batches"] == 4]
    for rank in range(SLOTS):
        assert [r["total_batches"] for r in resumed_run.of_kind("load", rank)] == [4]
        assert [
            (r["first_batch_idx"], r["checkpoint_uuid"]) for r in resumed_run.of_kind("startup", rank)
        ] == [(4, ckpt["uuid"])]


# --- 4. failures --------------------------------------------------------------------------------

FAIL_BATCH = 3
FAIL_RANK = 1


@pytest.fixture(scope="module", params=["raise", "sigkill"])
def failed_run(backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    hp = {**HP, "fail_batch": FAIL_BATCH, "fail_rank": FAIL_RANK, "fail_how": request.param}
    return run(
        backend, SLOTS, LINEAR, hp, exp_conf(1), MAX_BATCHES, tmp_path_factory.mktemp(f"fail_{backend}")
    )


@pytest.mark.timeout(400)
def test_a_failing_worker_fails_the_trial_once_and_promptly(failed_run: Run) -> None:
    r = failed_run
    (fail,) = r.of_kind("fail", FAIL_RANK)
    assert r.code != 0 and r.result.status == "error", describe(r)
    # The result names the failing worker and what happened to it.
    assert r.result.error is not None and r.result.error.startswith(f"rank {FAIL_RANK}: "), r.result.error
    if fail["how"] == "raise":
        assert f"RuntimeError: {FAIL_MESSAGE} at batch {FAIL_BATCH} on rank {FAIL_RANK}" in r.result.error
        # The original error reaches the output once, from the failing rank, with its traceback.
        mentions = [line for line in r.lines if FAIL_MESSAGE in line]
        assert len(mentions) == 1 and mentions[0].startswith(f"[rank {FAIL_RANK}]"), describe(r)
        before = r.lines[: r.lines.index(mentions[0])]
        assert any(line.startswith(f"[rank {FAIL_RANK}] Traceback") for line in before), describe(r)
    else:
        assert "SIGKILL" in r.result.error, r.result.error
    # Every other worker stopped well within 30 s of the failure.
    assert r.returned_at - fail["t"] < 30.0
    # The other rank never got past the failing batch.
    assert max(b["batch_idx"] for b in r.of_kind("batch", 0)) < FAIL_BATCH


def test_a_failing_worker_leaves_no_process_behind(failed_run: Run) -> None:
    assert processes_mentioning(failed_run.spec_path) == []
