"""Determined Core API scripts (``det.core.init()``) through ``det-lite experiment create``.

``tests/fixtures/determined_scripts/core_train.py`` writes its own loop against ``determined.*``
only; its weights follow the closed form of ``tests/compat/test_determined_trial.py`` (gamma 1).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict

import pytest

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.compat.test_determined_trial import weights
from tests.fixtures.tb import scalars

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")

pytestmark = pytest.mark.timeout(300)


def write_config(tmp_path: Any, **changes: Any) -> str:
    return _write_config(os.path.join(SCRIPTS, "core.yaml"), tmp_path, **changes)


def val_loss(w: float) -> float:
    return 11 * (w - 2) ** 2


def assert_closed_form(trial: Dict[str, Any], lr: float = 0.01) -> None:
    """Every reported metric is the closed form at its batch."""
    ws = weights(trial["total_batches"], lr=lr, gamma=1.0)
    assert [t["total_batches"] for t in trial["training_metrics"]] == list(
        range(1, trial["total_batches"] + 1)
    )
    for t in trial["training_metrics"]:
        assert t["metrics"]["weight"] == pytest.approx(ws[t["total_batches"] - 1], rel=1e-12)
    for v in trial["validation_metrics"]:
        w = ws[v["total_batches"] - 1]
        assert v["metrics"] == {"val_loss": pytest.approx(val_loss(w), rel=1e-12), "weight": pytest.approx(w)}


def printed_best(output: str) -> list:
    """The script's ``print_best`` lines: (before|after, get_experiment_best_validation())."""
    found = re.findall(r"core: best (before|after) (None|[-+0-9.e]+)", output)
    return [(when, None if value == "None" else float(value)) for when, value in found]


def test_get_experiment_best_validation_reads_every_trial(tmp_path, _det_lite_home):
    """Two trials one after the other: the second reads the first's best before training, and
    after its own validation report the better of both (the local executor's chief reads the
    store itself)."""
    changes = {
        "hyperparameters.print_best": True,
        "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
        "searcher.name": "grid",
        "searcher.max_concurrent_trials": 1,
    }
    proc = cli("experiment", "create", write_config(tmp_path, **changes), SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = sorted(describe(1)["trials"], key=lambda t: t["id"])
    best = [val_loss(weights(8, lr=t["hparams"]["lr"], gamma=1.0)[-1]) for t in (first, second)]
    assert [first["best_validation"], second["best_validation"]] == pytest.approx(best, rel=1e-12)
    assert printed_best(logs(first["id"])) == [("before", None), ("after", pytest.approx(best[0], rel=1e-12))]
    expected = [("before", pytest.approx(best[0], rel=1e-12)), ("after", pytest.approx(min(best), rel=1e-12))]
    assert printed_best(logs(second["id"])) == expected


def logs(trial_id: int) -> str:
    return cli("trial", "logs", str(trial_id)).stdout


def test_a_core_api_script_reports_metrics_and_checkpoints(tmp_path, _det_lite_home):
    """Determined's launcher prefix, a Core API loop: training metrics at every batch, the
    searcher op's validation at max_length, checkpoints registered (retention: the latest and
    the best are kept)."""
    proc = cli("experiment", "create", os.path.join(SCRIPTS, "core.yaml"), SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["config"]["entrypoint"] == "python3 core_train.py"
    assert exp["config"]["resources"]["distributed_backend"] == "torch"
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 8
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [8]
    assert_closed_form(trial)
    assert trial["best_validation"] == pytest.approx(val_loss(weights(8, gamma=1.0)[-1]), rel=1e-12)
    (ckpt,) = trial["checkpoints"]  # Determined's default retention: the best and the latest, one here
    assert ckpt["total_batches"] == 8
    with open(os.path.join(ckpt["path"], "metadata.json")) as f:
        meta = json.load(f)
    assert meta["steps_completed"] == 8 and meta["trial_id"] == trial["id"] and meta["experiment_id"] == 1
    assert oct(os.stat(ckpt["path"]).st_mode & 0o777) == "0o700"
    with open(os.path.join(ckpt["path"], "state.json")) as f:
        assert json.load(f)["w"] == pytest.approx(weights(8, gamma=1.0)[-1], rel=1e-12)
    # TensorBoard, as for class trials: every reported scalar at its batch.
    tb = scalars(os.path.join(str(_det_lite_home), "tensorboard", "experiment_1", f"trial_{trial['id']}"))
    assert [step for step, _ in tb["training/weight"]] == list(range(1, 9))
    assert tb["validation/val_loss"] == [(8, pytest.approx(val_loss(weights(8, gamma=1.0)[-1]), rel=1e-6))]


def test_a_script_with_no_searcher_length_trains_to_its_own(tmp_path):
    """Determined >= 0.38's single searcher has no length: the script trains to its own (6
    batches here), validating as it goes; the last validation is the searcher's."""
    path = write_config(
        tmp_path,
        searcher={"name": "single", "metric": "val_loss"},
        **{"hyperparameters.own_length": 6},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "train to the length the script sets" in proc.stdout
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 6
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [2, 4, 6]
    w = weights(6, gamma=1.0)[-1]
    assert trial["best_validation"] == pytest.approx(val_loss(w), rel=1e-12)


def asha_over_own_length(tmp_path: Any, **hparams: Any) -> str:
    """Two trials of ASHA (rungs at 4 and 8 ``batches_seen``) over the script's own length (8
    batches unless ``hparams`` say otherwise)."""
    return write_config(
        tmp_path,
        searcher={
            "name": "adaptive_asha",
            "metric": "val_loss",
            "time_metric": "batches_seen",
            "max_time": 8,
            "max_trials": 2,
            "max_rungs": 2,
            "divisor": 2,
            "mode": "aggressive",
        },
        hyperparameters={
            "lr": {"type": "double", "minval": 0.005, "maxval": 0.02},
            "own_length": 8,
            **hparams,
        },
        **{"reproducibility.experiment_seed": 1},
    )


def test_asha_never_relaunches_a_trial_already_at_its_target(tmp_path):
    """A script that never asks ``should_preempt()`` trains past its rung (to its own 8 batches);
    ASHA's promotion to 8 then finds it there: it is not run again (it would report nothing
    new and end as ERROR), its validation at 8 goes to the searcher."""
    path = asha_over_own_length(tmp_path, preempt=False)
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is at its target already (batch 8): not run again" in proc.stdout
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    assert [t["state"] for t in exp["trials"]] == ["COMPLETED", "COMPLETED"]
    assert [t["total_batches"] for t in exp["trials"]] == [8, 8]
    assert len(re.findall(r"trial \d+ starts", proc.stdout)) == 2  # one run each


def test_a_search_whose_best_trial_errored_says_so_in_its_final_line(tmp_path):
    """ASHA promotes the best trial, whose resumed run fails: the experiment completes (as in
    Determined: its other trial completed; exit 0), and the final line says which trial
    errored, that it was the best, and where its logs are."""
    path = asha_over_own_length(tmp_path, fail_on_resume=True)
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    (errored,) = [t for t in exp["trials"] if t["state"] == "ERROR"]
    assert exp["state"] == "COMPLETED" and errored["total_batches"] == 4
    final = proc.stdout.strip().splitlines()[-1]
    assert final == (
        f"experiment 1 COMPLETED; 1 of 2 trials ERROR: {errored['id']} (the best by val_loss "
        f"among them); see det-lite trial logs {errored['id']}"
    )


def test_report_early_exit_ends_only_that_trial(tmp_path):
    """``report_early_exit(INVALID_HP)``: Determined ends that trial; the search goes on."""
    path = write_config(
        tmp_path,
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 4}},
        hyperparameters={"lr": {"type": "categorical", "vals": [0.01, 5.0]}},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    trials = {t["hparams"]["lr"]: t for t in exp["trials"]}
    assert trials[5.0]["state"] == "CANCELED" and trials[5.0]["total_batches"] == 0
    assert trials[0.01]["state"] == "COMPLETED" and trials[0.01]["total_batches"] == 4
    assert_closed_form(trials[0.01])


def test_adaptive_asha_resumes_promoted_trials_through_restore_path(tmp_path):
    """ASHA asks for 4 batches, then 8 of the better trials: each rung is a run of the script
    that restores the previous rung's checkpoint (``info.latest_checkpoint`` through
    ``checkpoint.restore_path`` and ``get_metadata``); the metrics equal an uninterrupted run.
    (``DET_LITE_NEXT_OP=0``: no promotion trains on in its process, which restores nothing;
    tests/experiment/test_next_ops.py.)"""
    path = write_config(
        tmp_path,
        searcher={
            "name": "adaptive_asha",
            "metric": "val_loss",
            "max_length": {"batches": 8},
            "max_trials": 2,
            "max_rungs": 2,
            "divisor": 2,
            "mode": "aggressive",  # one bracket: both trials train 4 batches, the better one 8
        },
        hyperparameters={"lr": {"type": "double", "minval": 0.005, "maxval": 0.02}},
        **{"reproducibility.experiment_seed": 1},
    )
    proc = cli("experiment", "create", path, SCRIPTS, env=dict(os.environ, DET_LITE_NEXT_OP="0"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    assert sorted(t["total_batches"] for t in exp["trials"]) == [4, 8]
    for trial in exp["trials"]:
        assert_closed_form(trial, lr=trial["hparams"]["lr"])
        if trial["total_batches"] == 8:
            assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8]
            pattern = r"core: restored ([0-9a-f-]{36}) at (\d+) \(metadata (\d+)\)"
            (restored,) = re.findall(pattern, logs(trial["id"]))
            assert restored[1:] == ("4", "4")


def test_time_metric_and_max_time_drive_asha_for_a_script_that_sets_its_own_length(tmp_path):
    """Determined >= 0.38's searcher: ``time_metric`` (a validation metric the script reports)
    and ``max_time``, no searcher operations; the script trains to its own length. A run ends
    (``should_preempt()``) once ``batches_seen`` reaches the rung; the promoted trial resumes
    there and equals an uninterrupted run."""
    path = asha_over_own_length(tmp_path, own_length=100)
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "train to 4 batches_seen" in proc.stdout
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    assert (
        exp["config"]["searcher"]["time_metric"] == "batches_seen"
        and "max_length" not in exp["config"]["searcher"]
    )
    assert sorted(t["total_batches"] for t in exp["trials"]) == [4, 8]
    for trial in exp["trials"]:
        ws = weights(trial["total_batches"], lr=trial["hparams"]["lr"], gamma=1.0)
        expected = list(range(2, trial["total_batches"] + 1, 2))
        assert [v["total_batches"] for v in trial["validation_metrics"]] == expected
        for v in trial["validation_metrics"]:
            assert v["metrics"]["weight"] == pytest.approx(ws[v["total_batches"] - 1], rel=1e-12)
            assert v["metrics"]["batches_seen"] == v["total_batches"]
