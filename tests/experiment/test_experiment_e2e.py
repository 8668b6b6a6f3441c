"""`det-lite experiment create` end to end on the closed-form linear trial.

Every number the store reports is compared with the hand-computed weights of
``tests/fixtures/experiments/linear/model_def.py``: x = 1..8, y = 2x, SGD on one weight.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import activate, asha_overrides, cli, describe, pause_foreground, wait_for_batches
from tests.cli_helpers import write_config as _write_config
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = pytest.mark.timeout(240)


def write_config(tmp_path, name: str = "exp.yaml", **changes) -> str:
    return _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, name, **changes)


def weight_after(batches: int, lr: float = 0.01) -> float:
    return closed_form(lr, batches, batch_size=2, n=8)[batches - 1]


def assert_closed_form_validations(trial: dict, lr: float = 0.01) -> None:
    assert trial["validation_metrics"], "no validation reported"
    for v in trial["validation_metrics"]:
        w = weight_after(v["total_batches"], lr)
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


def test_create_describe_list_logs_export(tmp_path, _det_lite_home):
    proc = cli("experiment", "create", os.path.join(LINEAR, "const.yaml"), LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED" in proc.stdout

    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["total_batches"] == 12
    assert trial["restarts"] == 0
    assert trial["hparams"] == {"global_batch_size": 2, "lr": 0.01, "dataset_size": 8, "val_size": 4}
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    assert_closed_form_validations(trial)
    # Training metrics: every scheduling unit (2 batches), the mean of the weights after each batch.
    ws = closed_form(0.01, 12, 2, 8)
    assert [t["total_batches"] for t in trial["training_metrics"]] == [2, 4, 6, 8, 10, 12]
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)
    assert trial["best_validation"] == pytest.approx(val_loss(weight_after(12), 4), rel=1e-9)
    # Retention (save_trial_best 1, save_trial_latest 1): the final checkpoint is both.
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 12 and os.path.isdir(ckpt["path"])

    listed = json.loads(cli("experiment", "list", "--json", check=True).stdout)
    assert [(e["id"], e["state"]) for e in listed] == [(1, "COMPLETED")]
    logs = cli("experiment", "logs", "1", check=True).stdout
    assert "batch 12 validation" in logs
    trial_logs = cli("trial", "logs", str(trial["id"]), check=True).stdout
    assert "batch 4 validation" in trial_logs

    dest = os.path.join(str(tmp_path), "exported")
    cli("checkpoint", "export", ckpt["uuid"], dest, check=True)
    from determined_lite.pytorch import load_trial_from_checkpoint_path

    with pytest.raises(ImportError, match="trust=True"):  # model_def is only in the checkpoint's code/
        load_trial_from_checkpoint_path(dest)
    restored = load_trial_from_checkpoint_path(dest, trust=True)  # our own export: trusted
    assert restored.model.weight.item() == pytest.approx(weight_after(12), rel=1e-12)

    # TensorBoard event files of the trial were written where `det-lite tensorboard 1` looks.
    tb = os.path.join(str(_det_lite_home), "tensorboard", "experiment_1", f"trial_{trial['id']}")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tb))


def test_test_mode_runs_two_steps(tmp_path):
    proc = cli("experiment", "create", os.path.join(LINEAR, "const.yaml"), LINEAR, "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Model definition test succeeded" in proc.stdout
    # It says what it runs (it said "train to 12 batches" and ran one).
    said = "starts: test of 2 optimizer steps (2 batches), 2 validation batches and a checkpoint"
    assert said in proc.stdout
    (trial,) = describe(1)["trials"]
    assert trial["total_batches"] == 2
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [2]
    assert len(trial["checkpoints"]) == 1


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
        {
            "name": "adaptive_asha",
            "metric": "val_loss",
            "max_length": {"batches": 12},
            "max_trials": 4,
            "mode": "aggressive",
        },
    ],
    ids=["grid", "asha"],
)
def test_test_mode_on_a_search_runs_one_trial(tmp_path, searcher):
    """``--test`` checks the model definition once, as Determined's test mode (a ``single``
    searcher): one trial of the 4 the search would run."""
    lr = {"type": "categorical", "vals": [0.01, 0.02, 0.03, 0.04]}
    if searcher["name"] != "grid":
        lr = {"type": "double", "minval": 0.01, "maxval": 0.04}
    path = write_config(tmp_path, searcher=searcher, **{"hyperparameters.lr": lr})
    proc = cli("experiment", "create", path, LINEAR, "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Model definition test succeeded" in proc.stdout
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 2
    assert 0.01 <= trial["hparams"]["lr"] <= 0.04


def test_config_error_exits_2_naming_the_field(tmp_path):
    path = write_config(tmp_path, **{"searcher.max_length": {"steps": 10}})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2
    assert "searcher.max_length" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_entrypoint_names_the_module(tmp_path):
    path = write_config(tmp_path, entrypoint="no_such_module:Trial")
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2
    assert "no_such_module" in proc.stderr and "Traceback" not in proc.stderr
    path = write_config(tmp_path, entrypoint="model_def:NoSuchTrial")
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2
    assert "NoSuchTrial" in proc.stderr


def test_override_and_grid_search_covers_the_grid(tmp_path):
    path = write_config(
        tmp_path,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 4}},
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
            "hyperparameters.val_size": {"type": "int", "minval": 2, "maxval": 4, "count": 2},
        },
    )
    proc = cli("experiment", "create", path, LINEAR, "--config", "min_validation_period.batches=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = describe(1)["trials"]
    assert sorted((t["hparams"]["lr"], t["hparams"]["val_size"]) for t in trials) == [
        (0.01, 2),
        (0.01, 4),
        (0.02, 2),
        (0.02, 4),
    ]
    for t in trials:
        assert t["state"] == "COMPLETED"
        assert [v["total_batches"] for v in t["validation_metrics"]] == [2, 4]
        final = t["validation_metrics"][-1]["metrics"]["val_loss"]
        w = weight_after(4, t["hparams"]["lr"])
        assert final == pytest.approx(val_loss(w, t["hparams"]["val_size"]), rel=1e-9)


def test_invalid_hp_ends_the_trial_not_the_experiment(tmp_path):
    path = write_config(
        tmp_path,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 2}},
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.5]},
            "hyperparameters.invalid_above": 0.1,
        },
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    states = {t["hparams"]["lr"]: t["state"] for t in describe(1)["trials"]}
    assert states == {0.01: "COMPLETED", 0.5: "CANCELED"}


def test_asha_promotes_by_resuming_from_checkpoints(tmp_path):
    path = write_config(
        tmp_path,
        **asha_overrides(
            **{
                "hyperparameters.lr": {"type": "categorical", "vals": [0.001, 0.003, 0.01, 0.02]},
                "min_validation_period": None,
            }
        ),
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    trials = exp["trials"]
    assert len(trials) == 4
    lengths = sorted(t["total_batches"] for t in trials)
    # Rungs at 2, 4, 8 batches: the best trial reaches 8, one more reaches at least 4.
    assert lengths[-1] == 8 and set(lengths) <= {2, 4, 8}
    logs = cli("experiment", "logs", "1", check=True).stdout
    for t in trials:
        reached = [v["total_batches"] for v in t["validation_metrics"]]
        # One validation per rung reached, each reported once: nothing was retrained.
        assert reached == sorted(set(reached)) and reached[-1] == t["total_batches"]
        training = [m["total_batches"] for m in t["training_metrics"]]
        assert training == sorted(set(training))
        # Promoted trials resumed from the checkpoint of their previous rung, or trained on in
        # their process when promoted as they reported there (tests/experiment/test_next_ops.py),
        # and their metrics equal the uninterrupted closed form.
        for prev in reached[:-1]:
            resumed = f"trial {t['id']} starts: train to" in logs and f"(batch {prev})" in logs
            assert resumed or f"trial {t['id']} promoted at {prev}: train to" in logs
        assert_closed_form_validations(t, t["hparams"]["lr"])
    best = min(trials, key=lambda t: t["best_validation"])
    assert best["total_batches"] == 8


def test_restart_after_failure_resumes_from_checkpoint(tmp_path):
    marker = tmp_path / "markers"
    marker.mkdir()
    path = write_config(
        tmp_path,
        **{
            "hyperparameters.fail_once_at": 6,
            "hyperparameters.marker_dir": str(marker),
            "min_checkpoint_period": {"batches": 4},
        },
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["restarts"] == 1
    assert trial["state"] == "COMPLETED"
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    assert_closed_form_validations(trial)
    assert [t["total_batches"] for t in trial["training_metrics"]] == [2, 4, 6, 8, 10, 12]
    assert "injected failure at batch 6" in cli("trial", "logs", str(trial["id"]), check=True).stdout


def test_retention_keeps_exactly_what_the_policy_names(tmp_path, _det_lite_home):
    path = write_config(
        tmp_path,
        **{
            "checkpoint_policy": "all",
            "min_checkpoint_period": {"batches": 2},
            "min_validation_period": {"batches": 4},
            "checkpoint_storage": {"save_trial_latest": 2, "save_trial_best": 1, "save_experiment_best": 0},
            # lr 0.05 diverges slowly (|w - 2| grows 1.79x per epoch): the best validation is the first.
            "hyperparameters.lr": 0.05,
        },
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    losses = {v["total_batches"]: v["metrics"]["val_loss"] for v in trial["validation_metrics"]}
    assert min(losses, key=losses.get) == 4
    expected = {4, 10, 12}
    assert {c["total_batches"] for c in trial["checkpoints"]} == expected
    on_disk = set(os.listdir(os.path.join(str(_det_lite_home), "checkpoints")))
    assert on_disk == {c["uuid"] for c in trial["checkpoints"]}


def _start_foreground(path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def _slow_config(tmp_path) -> str:
    return write_config(
        tmp_path,
        **{"hyperparameters.sleep_s": 0.1, "searcher.max_length": {"batches": 24}},
    )


def _assert_uninterrupted(trial: dict) -> None:
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12, 16, 20, 24]
    assert_closed_form_validations(trial)
    training = [t["total_batches"] for t in trial["training_metrics"]]
    assert training == list(range(2, 25, 2))
    ws = closed_form(0.01, 24, 2, 8)
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)


def test_pause_then_activate_equals_uninterrupted(tmp_path):
    proc = _start_foreground(_slow_config(tmp_path))
    wait_for_batches(1, 4, proc)
    pause_foreground(1, proc)
    exp = describe(1)
    assert exp["state"] == "PAUSED"
    (trial,) = exp["trials"]
    assert trial["state"] == "PAUSED" and 4 <= trial["total_batches"] < 24
    activate(1)
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])


def test_sigkill_of_the_foreground_process_then_activate(tmp_path):
    proc = _start_foreground(_slow_config(tmp_path))
    wait_for_batches(1, 6, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    # The workers notice their supervisor is gone and stop on their own.
    time.sleep(3)
    mid = describe(1)  # PAUSED once its trial's processes exited (tests/experiment/test_hangup.py)
    assert mid["state"] in ("ACTIVE", "PAUSED") and not mid.get("running", False)
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])


def test_kill_cancels_a_running_experiment(tmp_path):
    proc = _start_foreground(_slow_config(tmp_path))
    wait_for_batches(1, 2, proc)
    cli("experiment", "kill", "1", check=True)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    exp = describe(1)
    assert exp["state"] == "CANCELED"
    assert exp["trials"][0]["state"] == "CANCELED"
    assert cli("experiment", "activate", "1").returncode == 2


def test_detach_runs_in_the_background(tmp_path):
    proc = cli("experiment", "create", os.path.join(LINEAR, "const.yaml"), LINEAR, "--detach")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Created experiment 1" in proc.stdout
    deadline = time.monotonic() + budget(120)
    while describe(1)["state"] == "ACTIVE" and time.monotonic() < deadline:
        time.sleep(0.3)
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    assert_closed_form_validations(exp["trials"][0])


def test_context_directory_is_copied_into_checkpoints(tmp_path):
    ctx = tmp_path / "ctx"
    shutil.copytree(LINEAR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (ckpt,) = describe(1)["trials"][0]["checkpoints"]
    assert sorted(os.listdir(os.path.join(ckpt["path"], "code"))) == [
        ".det-lite-snapshot.json",
        "__init__.py",
        "const.yaml",
        "model_def.py",
    ]


@pytest.mark.parametrize("backend", ["torch", "horovod"])
def test_two_slot_experiment_matches_the_closed_form(tmp_path, backend):
    """`resources.slots_per_trial: 2` through the CLI: per-slot batch 1, same weights as 1 slot."""
    path = write_config(
        tmp_path,
        **{"resources": {"slots_per_trial": 2, "distributed_backend": backend}},
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12
    assert_closed_form_validations(trial)
    logs = cli("trial", "logs", str(trial["id"]), check=True).stdout
    assert "[rank 0] " in logs  # workers prefix their lines only when there are several ranks


def test_trials_run_concurrently_up_to_max_concurrent_trials(tmp_path, monkeypatch):
    monkeypatch.setenv("DET_LITE_SLOTS", "4")
    path = write_config(
        tmp_path,
        **{
            "searcher": {
                "name": "grid",
                "metric": "val_loss",
                "max_length": {"batches": 8},
                "max_concurrent_trials": 2,
            },
            "hyperparameters.lr": {"type": "categorical", "vals": [0.001, 0.002, 0.003]},
            "hyperparameters.sleep_s": 0.15,
        },
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from determined_lite.store import Store

    starts = sorted(
        line["time"] for line in Store().logs.list(experiment_id=1) if "starts: train to" in line["line"]
    )
    assert len(starts) == 3
    trials = describe(1)["trials"]
    ends = sorted(t["ended_at"] for t in trials)
    # The third trial starts only after one of the first two ended; the first two overlap.
    assert starts[1] < ends[0]
    assert starts[2] >= ends[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_pauses_at_a_checkpoint_where_training_stopped(tmp_path, sig):
    # Issue 16, item 6: Ctrl-C (SIGINT) or SIGTERM pauses as `experiment pause` does: the trial
    # checkpoints where it stopped, so activate retrains nothing. Before, the workers were
    # stopped at once and the trial resumed from its last periodic checkpoint (none here: it
    # retrained from batch 0).
    proc = _start_foreground(_slow_config(tmp_path))
    wait_for_batches(1, 6, proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    assert "pausing experiment 1" in out
    exp = describe(1)
    assert exp["state"] == "PAUSED"
    (trial,) = exp["trials"]
    stopped_at = trial["total_batches"]
    assert trial["state"] == "PAUSED" and 6 <= stopped_at < 24
    assert max(c["total_batches"] for c in trial["checkpoints"]) == stopped_at
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(batch {stopped_at})" in cli("experiment", "logs", "1", check=True).stdout
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])


def test_pause_creates_no_trial_until_activate(tmp_path):
    # Issue 16, item 6: a trial that finishes while the experiment is pausing must not make the
    # searcher create (let alone start) the next ones; ASHA creates them on activate.
    path = write_config(
        tmp_path,
        **{
            "hyperparameters.sleep_s": 0.3,
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02, 0.03]},
            "searcher": {
                "name": "adaptive_asha",
                "metric": "val_loss",
                "max_length": {"batches": 8},
                "max_trials": 3,
                "divisor": 2,
                "max_rungs": 3,
                "mode": "aggressive",
                "max_concurrent_trials": 1,
            },
            "min_validation_period": None,
            # The pause is seen at the next report: with reports every 100 batches, that is the
            # end of the first rung (4 batches), so the trial completes its rung while pausing.
            "scheduling_unit": 100,
        },
    )
    proc = _start_foreground(path)
    wait_for_batches(1, 0, proc)
    out = pause_foreground(1, proc)
    exp = describe(1)
    assert exp["state"] == "PAUSED" and len(exp["trials"]) == 1, out
    assert exp["trials"][0]["total_batches"] == 4  # its rung was done when the pause took effect
    activate(1)
    exp = describe(1)
    assert exp["state"] == "COMPLETED" and len(exp["trials"]) == 3
    assert all(t["state"] == "COMPLETED" for t in exp["trials"])
