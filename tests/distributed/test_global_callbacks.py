"""Global callbacks reach the workers of a launched trial through ``det_lite.callback_modules``,
on 2 slots and both engines; the EarlyStopping it registers stops every rank at the validated
batch (no extra batch; the final checkpoint is the validated one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

from tests.distributed._helpers import BACKENDS, describe, run

HP: Dict[str, Any] = {"lr": 0.005, "w0": 0.5, "global_batch_size": 4, "dataset_size": 12, "val_size": 12}
EXP_CONF: Dict[str, Any] = {
    "min_validation_period": {"batches": 2},
    "scheduling_unit": 2,
    "det_lite": {"callback_modules": ["global_early_stop"]},  # tests/fixtures/global_early_stop.py
}

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_config_named_module_registers_callbacks_in_every_worker(backend: str, tmp_path: Path) -> None:
    r = run(backend, 2, "dist_trials:DistLinearTrial", HP, EXP_CONF, 8, tmp_path)
    assert r.code == 0, describe(r)
    # Validations after batches 2 and 4; the second does not improve: stop there, on both ranks.
    assert r.result.status == "stopped" and r.result.total_batches == 4, describe(r)
    assert r.result.checkpoints[-1]["total_batches"] == 4
    assert r.result.validation_metrics is not None
    for rank in (0, 1):
        assert max(b["batch_idx"] for b in r.of_kind("batch", rank)) == 3, rank
        assert len(r.of_kind("val", rank)) == 2, rank
