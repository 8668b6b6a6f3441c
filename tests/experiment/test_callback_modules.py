"""``det_lite.callback_modules`` through the CLI: a module missing from the context is refused
at ``experiment create`` (one line, exit 2); one that is there registers its callbacks in the
trial's worker (here an EarlyStopping that ends the trial at its second validation)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli_helpers import cli, describe, write_config
from tests.experiment.test_context_snapshot import assert_nothing_recorded
from tests.experiment.test_experiment_e2e import LINEAR

pytestmark = pytest.mark.timeout(240)

EARLY_STOP = """
from determined_lite.pytorch import register_global_callback
from determined_lite.pytorch.callbacks import EarlyStopping

register_global_callback(EarlyStopping("val_loss", patience=1, min_delta=1e9))
"""


def _context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    shutil.copytree(LINEAR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    return ctx


def test_a_missing_module_is_refused_at_create(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = _context(tmp_path)
    config = write_config(str(ctx / "const.yaml"), tmp_path, **{"det_lite.callback_modules": ["my_cbs.py"]})
    proc = cli("experiment", "create", config, str(ctx))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"det-lite: error: {config}: det_lite.callback_modules[0]: no module 'my_cbs.py' in context "
        f"directory {ctx} or the Python environment (a module name, not a file: 'my_cbs'?)"
    ]
    assert_nothing_recorded(_det_lite_home)


def test_the_modules_callbacks_run_in_the_trials_worker(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    (ctx / "my_cbs.py").write_text(EARLY_STOP)
    config = write_config(str(ctx / "const.yaml"), tmp_path, **{"det_lite.callback_modules": ["my_cbs"]})
    proc = cli("experiment", "create", config, str(ctx))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    # max_length 12, validation every 4: the validation at 8 does not improve on the one at 4.
    assert trial["state"] == "COMPLETED"
    assert trial["total_batches"] == 8
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8]
    assert trial["checkpoints"][-1]["total_batches"] == 8
