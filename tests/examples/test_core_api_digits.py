"""Determined's Core API tutorial, steps 0-4, adapted to scikit-learn's digits
(``examples/core_api_digits``), each run through ``det-lite experiment create`` with fewer epochs.

Steps 0-2 train the same model with the same seed on one slot: the accuracy step 0 prints is
the one steps 1 and 2 report.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

pytest.importorskip("sklearn", reason="examples need scikit-learn (pip install -e '.[test]')")

from tests.cli_helpers import REPO, cli, describe  # noqa: E402
from tests.cli_helpers import write_config as _write_config  # noqa: E402

TUTORIAL = os.path.join(REPO, "examples", "core_api_digits")
EPOCHS = 3
BATCHES_PER_EPOCH = 23  # 1437 training images in batches of 64

pytestmark = pytest.mark.timeout(600)


def write_config(tmp_path: Any, name: str, **changes: Any) -> str:
    return _write_config(os.path.join(TUTORIAL, name), tmp_path, name=name, **changes)


def create(path: str) -> dict:
    proc = cli("experiment", "create", path, TUTORIAL, timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = re.findall(r"Created experiment (\d+)", proc.stdout)
    return describe(int(ids[0]))


def test_steps_0_to_2_train_the_same_model(tmp_path):
    step0 = create(write_config(tmp_path, "const.yaml", entrypoint=f"python3 0_start.py --epochs {EPOCHS}"))
    (trial,) = step0["trials"]
    assert trial["state"] == "COMPLETED" and trial["validation_metrics"] == []  # it reports nothing
    printed = re.findall(
        r"epoch 3: test loss \S+, accuracy (\d+)/360", cli("trial", "logs", str(trial["id"])).stdout
    )
    accuracy = int(printed[0]) / 360
    assert accuracy >= 0.8

    for step, config in [("1_metrics.py", "metrics.yaml"), ("2_checkpoints.py", "checkpoints.yaml")]:
        exp = create(write_config(tmp_path, config, entrypoint=f"python3 {step} --epochs {EPOCHS}"))
        (trial,) = exp["trials"]
        assert trial["state"] == "COMPLETED" and trial["total_batches"] == EPOCHS * BATCHES_PER_EPOCH
        validations = trial["validation_metrics"]
        assert [v["total_batches"] for v in validations] == [
            BATCHES_PER_EPOCH * (e + 1) for e in range(EPOCHS)
        ]
        assert validations[-1]["metrics"]["accuracy"] == pytest.approx(accuracy)  # the same training
        assert [t["total_batches"] for t in trial["training_metrics"]][:2] == [10, 20]  # --log-interval 10
        if step == "2_checkpoints.py":
            (latest,) = [c for c in trial["checkpoints"] if c["total_batches"] == EPOCHS * BATCHES_PER_EPOCH]
            with open(os.path.join(latest["path"], "metadata.json")) as f:
                assert json.load(f)["steps_completed"] == EPOCHS * BATCHES_PER_EPOCH
            assert sorted(os.listdir(latest["path"])) == ["checkpoint.pt", "metadata.json", "state"]


def test_step_3_adaptive_asha_over_epochs(tmp_path):
    path = write_config(
        tmp_path,
        "adaptive.yaml",
        entrypoint="python3 3_hpsearch.py --epochs 4",
        **{"searcher.max_trials": 4, "searcher.max_time": 4, "searcher.max_rungs": 2},
    )
    exp = create(path)
    assert exp["state"] == "COMPLETED" and len(exp["trials"]) == 4
    for trial in exp["trials"]:
        epochs = [v["metrics"]["epochs"] for v in trial["validation_metrics"]]
        assert epochs == list(range(1, len(epochs) + 1)) and epochs[-1] in (2, 4)  # rungs: 2, 4 epochs
        assert trial["total_batches"] == epochs[-1] * BATCHES_PER_EPOCH
    assert max(t["total_batches"] for t in exp["trials"]) == 4 * BATCHES_PER_EPOCH


def test_step_3_adaptive_asha_over_batches_stops_each_trial_at_its_rung(tmp_path):
    """``time_metric: batches`` with the tutorial as written (it validates each epoch and reports
    ``epochs``, not ``batches``): ``should_preempt()`` is true at the first validation at or past
    the rung (25 then 50 batches: 2 and 3 epochs); a promoted trial resumes from its checkpoint;
    the summary names the best trial and the experiment completes."""
    path = write_config(
        tmp_path,
        "adaptive.yaml",
        entrypoint="python3 3_hpsearch.py --epochs 4",
        searcher={
            "name": "adaptive_asha",
            "metric": "test_loss",
            "smaller_is_better": True,
            "max_trials": 3,
            "max_rungs": 2,
            "divisor": 2,
            "mode": "aggressive",
            "time_metric": "batches",
            "max_time": 50,
        },
    )
    proc = cli("experiment", "create", path, TUTORIAL, timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "train to 25 batches" in proc.stdout and "train to 50 batches" in proc.stdout
    exp = describe(1)
    assert exp["state"] == "COMPLETED" and len(exp["trials"]) == 3
    assert all(t["state"] == "COMPLETED" for t in exp["trials"])
    ends = {t["total_batches"] for t in exp["trials"]}
    assert ends == {2 * BATCHES_PER_EPOCH, 3 * BATCHES_PER_EPOCH}  # the first epoch past each rung
    for trial in exp["trials"]:
        epochs = [v["metrics"]["epochs"] for v in trial["validation_metrics"]]
        assert epochs == list(range(1, trial["total_batches"] // BATCHES_PER_EPOCH + 1))
    assert "best trial" in proc.stdout


def test_step_4_distributed_on_two_workers(tmp_path):
    path = write_config(
        tmp_path,
        "distributed.yaml",
        entrypoint=["python3", "-m", "determined.launch.torch_distributed", "python3", "4_distributed.py"]
        + ["--epochs", str(EPOCHS)],
    )
    exp = create(path)
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["total_batches"] == EPOCHS * 23  # 719 images per worker in batches of 32
    assert trial["validation_metrics"][-1]["metrics"]["accuracy"] >= 0.8
    assert "[rank 1] epoch 3: accuracy" in cli("trial", "logs", str(trial["id"])).stdout
