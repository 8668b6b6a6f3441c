"""Several backward passes per optimizer step (``wrap_optimizer(backward_passes_per_step=2)``).

Determined's reference example: one forward pass, ``context.backward`` on two losses, one
``step_optimizer``. Every engine must average the accumulated gradient over the workers once per
step, so 2 workers reach the weights of 1 slot (and of the closed form: the gradient of a step is
the sum of the two halves' mean gradients, i.e. plain SGD with twice the learning rate).
Runs: 8 batches of global batch 4 on 12 shuffled records, aggregation_frequency 1 and 2, on
1 slot and on 2 workers of every engine (real Gloo / Horovod processes).
"""

from __future__ import annotations

from pathlib import Path
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

HP: Dict[str, Any] = {**TINY_HP, "shuffle": True, "backward_passes_per_step": 2}
TRIAL = "dist_trials:TwoBackwardTrial"

pytestmark = pytest.mark.timeout(600)


def _run(backend: str, slots: int, k: int, tmp_path: Path) -> Run:
    conf = {"scheduling_unit": 4, "optimizations": {"aggregation_frequency": k}}
    r = run(backend, slots, TRIAL, HP, conf, MAX_BATCHES, tmp_path)
    assert r.code == 0 and r.result.status == "completed", describe(r)
    return r


@pytest.fixture(scope="module")
def single(k: int, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run("single", 1, k, tmp_path_factory.mktemp(f"single_k{k}"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_backward_passes_per_step_give_the_single_slot_weights(
    backend: str, k: int, single: Run, tmp_path: Path
) -> None:
    multi = _run(backend, SLOTS, k, tmp_path)
    batches = global_batches(multi, SLOTS)
    assert batches == global_batches(single, 1) and len(batches) == MAX_BATCHES
    expected = expected_weights(HP["w0"], 2 * HP["lr"], batches, aggregation=k)
    assert weights(single, 0) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # Both workers hold the same weight after every batch, and it is the single slot's.
    assert weights(multi, 0) == weights(multi, 1)
    assert weights(multi, 0) == pytest.approx(expected, rel=1e-12, abs=1e-12)
