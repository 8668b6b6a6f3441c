"""Determined scripts (``entrypoint: python3 train.py``) through ``det-lite experiment create``.

``tests/fixtures/determined_scripts`` holds a Trainer-API script and a Core-API script written
only against ``determined.*``. Numbers follow the closed form of
``tests/compat/test_determined_trial.py`` (x = 1..8, y = 2x, one weight, SGD, per-slot batch 2;
no LR decay here: gamma = 1).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List

import pytest

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.compat.test_determined_trial import weights

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")

pytestmark = pytest.mark.timeout(300)


def write_config(tmp_path: Any, source: str, **changes: Any) -> str:
    return _write_config(os.path.join(SCRIPTS, source), tmp_path, **changes)


def val_loss(w: float) -> float:
    return 11 * (w - 2) ** 2  # mean of (x (w - 2))^2 over x = 1..5


def cluster_infos(trial_id: int) -> List[Dict[str, Any]]:
    logs = cli("trial", "logs", str(trial_id)).stdout
    return [json.loads(m) for m in re.findall(r"cluster-info: (\{.*\})", logs)]


def test_a_trainer_script_runs_with_its_cluster_info(tmp_path):
    """Determined's Trainer-API script: det.get_cluster_info() gives the trial's hparams, ids and
    config ``data``; det.pytorch.init() with no arguments takes them; Trainer.fit trains to the
    searcher's max_length (8 batches), not the script's own Epoch(100), as on a cluster."""
    proc = cli("experiment", "create", os.path.join(SCRIPTS, "trainer.yaml"), SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 8
    ws = weights(8, gamma=1.0)
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8]
    for v in trial["validation_metrics"]:
        w = ws[v["total_batches"] - 1]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w), rel=1e-9)
    (info,) = cluster_infos(trial["id"])
    assert info == {
        "argv": ["--flag", "value"],
        "trial_id": trial["id"],
        "experiment_id": 1,
        "hparams": {"global_batch_size": 2, "lr": 0.01},
        "user_data": {"source": "fixture"},
        "trial_user_data": {"source": "fixture"},
        "latest_checkpoint": None,
        "container_rank": 0,
        "task_type": "TRIAL",
    }
