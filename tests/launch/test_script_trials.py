"""Determined scripts (``entrypoint: python3 train.py``) through ``det-lite experiment create``.

``tests/fixtures/determined_scripts`` holds a Trainer-API script and a Core-API script written
only against ``determined.*``. Numbers follow the closed form of
``tests/compat/test_determined_trial.py`` (x = 1..8, y = 2x, one weight, SGD, per-slot batch 2;
no LR decay here: gamma = 1).
"""

from __future__ import annotations

import glob
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


def test_a_trainer_scripts_checkpoint_loads_and_its_fit_profiles(tmp_path):
    """The trial class is defined in the script (``__main__`` as it runs): the checkpoint records
    it as ``train:Trial``, train.py being in its code/, so a trusted
    ``load_trial_from_checkpoint_path(path)`` imports it from there. The script's
    ``fit(profiling_enabled=True)`` profiles every batch (a trace in the trial's TensorBoard
    directory). Before: ``__main__:Trial``, which no later process imports; and no trace."""
    from determined_lite import pytorch

    path = write_config(tmp_path, "trainer.yaml", **{"hyperparameters.profile": True})
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    latest = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    assert latest["total_batches"] == 8
    with open(os.path.join(latest["path"], "metadata.json")) as f:
        assert json.load(f)["trial_class"] == "train:Trial"
    loaded = pytorch.load_trial_from_checkpoint_path(latest["path"], trust=True)
    assert type(loaded).__name__ == "Trial" and type(loaded).__module__ == "train"
    assert loaded.model.weight.item() == pytest.approx(weights(8, gamma=1.0)[-1], rel=1e-12)
    tensorboard = os.path.join(os.environ["DET_LITE_HOME"], "tensorboard", "experiment_1", "trial_1")
    (trace,) = glob.glob(os.path.join(tensorboard, "rank0.*.pt.trace.json"))
    with open(trace) as f:
        assert {int(n) for n in re.findall(r"ProfilerStep#(\d+)", f.read())} == set(range(8))


def test_a_trainer_script_with_no_searcher_length_trains_to_fits_length(tmp_path):
    """Determined >= 0.38: ``searcher: {name: single, metric: ...}`` with no length, the script
    calling ``trainer.fit(max_length=pytorch.Epoch(3), latest_checkpoint=...)`` behind Determined's
    launcher: the trial trains to fit's 3 epochs (12 batches), validating every 4."""
    path = write_config(
        tmp_path,
        "trainer.yaml",
        entrypoint="python3 -m determined.launch.torch_distributed python3 train.py",
        searcher={"name": "single", "metric": "val_loss"},
        **{"hyperparameters.epochs": 3},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "train to the length the script sets" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    w = weights(12, gamma=1.0)[-1]
    assert trial["best_validation"] == pytest.approx(val_loss(w), rel=1e-9)


def test_trainer_script_grid_in_list_form_after_the_launcher(tmp_path):
    """``entrypoint`` as a list with Determined's torch_distributed launcher prefix; a grid over
    lr: each trial's metrics are its closed form."""
    path = write_config(
        tmp_path,
        "trainer.yaml",
        entrypoint=["python3", "-m", "determined.launch.torch_distributed", "python3", "train.py"],
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 4}},
        **{"hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]}},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["config"]["entrypoint"] == "python3 train.py"
    assert sorted(t["hparams"]["lr"] for t in exp["trials"]) == [0.01, 0.02]
    for trial in exp["trials"]:
        assert trial["state"] == "COMPLETED" and trial["total_batches"] == 4
        (v,) = trial["validation_metrics"]
        w = weights(4, lr=trial["hparams"]["lr"], gamma=1.0)[-1]
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w), rel=1e-9)
        assert cluster_infos(trial["id"])[0]["argv"] == []


def test_trainer_script_adaptive_asha_with_time_metric_batches(tmp_path):
    """``time_metric: batches`` + ``max_time``: ASHA's rungs are batches; the promoted trial
    resumes from its rung checkpoint (``info.latest_checkpoint``, a uuid, given to fit) and
    reaches the uninterrupted run's weights (``DET_LITE_NEXT_OP=0``: a promotion decided at
    once would otherwise train on in its process, when the better trial happens to report
    last; tests/experiment/test_next_ops.py covers that path)."""
    path = write_config(
        tmp_path,
        "trainer.yaml",
        searcher={
            "name": "adaptive_asha",
            "metric": "val_loss",
            "time_metric": "batches",
            "max_time": 8,
            "max_trials": 2,
            "max_rungs": 2,
            "divisor": 2,
            "mode": "aggressive",
        },
        **{"hyperparameters.lr": {"type": "double", "minval": 0.005, "maxval": 0.02}},
    )
    proc = cli("experiment", "create", path, SCRIPTS, env=dict(os.environ, DET_LITE_NEXT_OP="0"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert sorted(t["total_batches"] for t in exp["trials"]) == [4, 8]
    for trial in exp["trials"]:
        ws = weights(trial["total_batches"], lr=trial["hparams"]["lr"], gamma=1.0)
        for v in trial["validation_metrics"]:
            assert v["metrics"]["weight"] == pytest.approx(ws[v["total_batches"] - 1], rel=1e-12)
        infos = cluster_infos(trial["id"])
        if trial["total_batches"] == 8:
            assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8]
            assert infos[0]["latest_checkpoint"] is None and infos[1]["latest_checkpoint"] is not None
