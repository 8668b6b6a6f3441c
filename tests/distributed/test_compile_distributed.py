"""``optimizations.compile`` on 2 workers of each engine (DDP and Horovod, Gloo, real processes)
through the real launcher: the weights follow the closed form of ``tests/fixtures/linear.py`` and
equal the 1-slot compiled run's, within the compiled-run tolerance (1e-9 relative, float64).

Runs: 8 batches of 12 shuffled records, global batch 4, validation every 4 batches (eval-mode
graph), checkpoints every 2; one with ``aggregation_frequency: 2``. Backend ``aot_eager``
(torch's graph capture and AOTAutograd; inductor is covered on one slot).
"""

from __future__ import annotations

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
    run,
    weights,
)
from tests.fixtures.linear import expected_weights

pytestmark = pytest.mark.timeout(900)

REL = 1e-9
HP: Dict[str, Any] = {**TINY_HP, "val_size": 11, "val_batch_size": 2, "shuffle": True}
LINEAR = "compile_trials:DistCompiledLinearTrial"


def exp_conf(k: int) -> Dict[str, Any]:
    return {
        "min_checkpoint_period": {"batches": 2},
        "min_validation_period": {"batches": 4},
        "scheduling_unit": 2,
        "optimizations": {"aggregation_frequency": k, "compile": {"enabled": True, "backend": "aot_eager"}},
    }


@pytest.fixture(scope="module")
def single(k: int, tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run("single", 1, LINEAR, HP, exp_conf(k), MAX_BATCHES, tmp_path_factory.mktemp(f"single_k{k}"))
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_slots_compiled_match_one_slot_and_the_closed_form(
    backend: str, k: int, single: Run, tmp_path: Any
) -> None:
    multi = run(backend, SLOTS, LINEAR, HP, exp_conf(k), MAX_BATCHES, tmp_path)
    assert multi.code == 0 and multi.result.status == "completed", describe(multi)
    batches = global_batches(multi, SLOTS)
    assert batches == global_batches(single, 1) and len(batches) == MAX_BATCHES
    expected = expected_weights(HP["w0"], HP["lr"], batches, aggregation=k)
    assert weights(single, 0) == pytest.approx(expected, rel=REL)
    assert weights(multi, 0) == pytest.approx(expected, rel=REL)
    assert weights(multi, 1) == weights(multi, 0)  # gradients were averaged across the workers
    assert weights(multi, 0) == pytest.approx(weights(single, 0), rel=REL)
    # Validation (the eval-mode graph) ran and agrees with one slot.
    val = [v["metrics"]["val_loss"] for v in multi.of_kind("val", 0)]
    one = [v["metrics"]["val_loss"] for v in single.of_kind("val", 0)]
    assert len(val) == 2 and val == pytest.approx(one, rel=REL)
    # Every worker compiled: a training graph for its per-slot batch of 2 and, after the first
    # validation (11 records in batches of 2, sharded: one rank's last batch holds 1), eval ones.
    last = []
    for rank in range(SLOTS):
        graphs = multi.of_kind("graphs", rank)
        assert graphs[0]["graphs"] == [[True, [2]]]
        last.append(graphs[-1]["graphs"])
    assert last == [[[False, [2]], [True, [2]]], [[False, [1]], [False, [2]], [True, [2]]]]


def test_missing_cxx_compiler_is_one_line_before_the_first_batch(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inductor on the CPU without a C++ compiler: the worker says so in one ``det-lite:`` line
    when the trial wraps its model (no traceback, no batch trained) and the trial is not
    restarted: the experiment pauses until the user installs one (an ``ActionRequired``)."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))  # read by torch in the worker
    conf = {**exp_conf(1), "optimizations": {"compile": True}}
    r = run("single", 1, LINEAR, HP, conf, MAX_BATCHES, tmp_path / "run")
    assert r.code != 0 and r.result.status == "error", describe(r)
    assert r.result.action_required is not None
    assert "backend 'inductor' on the CPU needs a C++ compiler" in r.result.action_required
    said = [line for line in r.lines if "needs a C++ compiler" in line]
    assert said and said[0].startswith("det-lite: optimizations.compile:"), describe(r)
    assert not any("Traceback" in line for line in r.lines), describe(r)
    assert r.of_kind("batch", 0) == [] and r.result.total_batches == 0
