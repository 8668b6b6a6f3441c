"""The SDK on real experiments, as a Determined user writes it: ``from determined.experimental
import client`` in a plain Python process, a 2-trial grid search of the closed-form linear trial
(``tests/fixtures/experiments/linear``), its best checkpoint downloaded and loaded; then pause,
activate and kill through the SDK, checked in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from determined_lite import client
from determined_lite.client import ExperimentState
from determined_lite.store import Store
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GRID = {
    "name": "sdk-grid",
    "entrypoint": "model_def:LinearTrial",
    "hyperparameters": {
        "global_batch_size": 2,
        "lr": {"type": "categorical", "vals": [0.001, 0.01]},
        "dataset_size": 8,
        "val_size": 4,
    },
    "searcher": {
        "name": "grid",
        "metric": "val_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 8},
    },
    "min_validation_period": {"batches": 4},
    "min_checkpoint_period": {"batches": 4},
    "checkpoint_storage": {"save_trial_best": 3, "save_trial_latest": 1},
    "scheduling_unit": 2,
    "reproducibility": {"experiment_seed": 7},
}

# What a Determined user runs (the first line: det-lite's alias, until its install hook does it).
USER_SCRIPT = """
from determined_lite.compat import install_alias; install_alias()
import json, sys, warnings
from determined.experimental import client
from determined import pytorch

client.login()
exp = client.create_experiment(json.loads(sys.argv[1]), sys.argv[2])
state = exp.wait(interval=0.5)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    best = exp.top_checkpoint()
path = best.download(sys.argv[3])
trial = pytorch.load_trial_from_checkpoint_path(path, trust=True)
print(json.dumps({
    "id": exp.id, "state": state.name, "uuid": best.uuid, "path": path,
    "hparams": best.training.hparams, "weight": trial.model.weight.item(),
    "warned": [str(w.message) for w in caught],
}))
"""


def test_top_checkpoint_of_a_grid_search_downloads_and_loads(tmp_path):
    dest = str(tmp_path / "best")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(USER_SCRIPT), json.dumps(GRID), LINEAR, dest],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["state"] == "COMPLETED" and out["path"] == dest
    assert out["hparams"]["lr"] == 0.01  # the larger step gets closer to w = 2 in 8 batches
    assert any("top_checkpoint() has been deprecated" in w for w in out["warned"])
    w8 = closed_form(0.01, 8, batch_size=2, n=8)[-1]
    assert out["weight"] == pytest.approx(w8, rel=1e-12)

    # The same experiment from this process: trials, metrics, logs, every checkpoint in order.
    exp = client.get_experiment(out["id"])
    assert exp.state == ExperimentState.COMPLETED and exp.config["searcher"]["metric"] == "val_loss"
    trials = exp.list_trials()
    assert [t.hparams["lr"] for t in trials] == [0.001, 0.01]
    losses = [c.training.validation_metrics["avgMetrics"]["val_loss"] for c in exp.list_checkpoints()]
    assert losses == sorted(losses) and len(losses) == 4
    assert exp.list_checkpoints()[0].uuid == out["uuid"]
    assert losses[0] == pytest.approx(val_loss(w8, 4), rel=1e-9)
    best_trial = client.get_trial(trials[1].id)
    validations = list(best_trial.iter_metrics("validation"))
    assert [(m.steps_completed, m.group) for m in validations] == [(4, "validation"), (8, "validation")]
    assert [m.steps_completed for m in best_trial.iter_metrics("training")] == [2, 4, 6, 8]
    assert any("batch 8 validation" in line for line in best_trial.iter_logs())
    with pytest.warns(FutureWarning, match=r"Trial.logs\(\) has been deprecated"):  # as Determined's
        assert list(best_trial.logs()) == list(best_trial.iter_logs())
    assert best_trial.list_checkpoints()[0].uuid == out["uuid"]
    assert [e.id for e in client.list_experiments()] == [out["id"]]


def _wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_pause_activate_and_kill_through_the_sdk(tmp_path):
    config = dict(
        GRID,
        name="sdk-control",
        searcher={"name": "single", "metric": "val_loss", "max_length": {"batches": 60}},
    )
    config["hyperparameters"] = dict(GRID["hyperparameters"], lr=0.01, sleep_s=0.2)
    exp = client.create_experiment(config, LINEAR)
    store = Store()

    def batches() -> int:
        trials = store.trials.list(exp.id)
        return trials[0]["total_batches"] if trials else 0

    _wait_for(lambda: batches() >= 2, "the trial to train")
    exp.pause()
    _wait_for(lambda: store.experiments.get(exp.id)["state"] == "PAUSED", "the pause")
    exp.reload()
    assert exp.state == ExperimentState.PAUSED
    paused_at = batches()
    assert store.checkpoints.list(experiment_id=exp.id), "a paused trial keeps a checkpoint"

    exp.activate()
    exp.reload()
    assert exp.state == ExperimentState.ACTIVE
    _wait_for(lambda: batches() > paused_at, "the resumed trial to train")
    exp.activate()  # already running: nothing to do, as in Determined
    exp.kill()
    assert exp.wait(interval=0.2) == ExperimentState.CANCELED
    assert store.experiments.get(exp.id)["state"] == "CANCELED"
    assert [t["state"] for t in store.trials.list(exp.id)] == ["CANCELED"]


def test_trial_kill_ends_one_trial_and_the_search_goes_on(tmp_path):
    # Determined's Trial.kill(): the killed trial ends CANCELED, the grid's other trial still
    # trains to its full length (closed-form weight), the experiment COMPLETES.
    config = dict(GRID, name="sdk-trial-kill")
    config["searcher"] = dict(GRID["searcher"], max_length={"batches": 12}, max_concurrent_trials=1)
    config["hyperparameters"] = dict(GRID["hyperparameters"], sleep_s=0.3)
    exp = client.create_experiment(config, LINEAR)
    store = Store()

    def first_trial_batches() -> int:
        trials = store.trials.list(exp.id)
        return trials[0]["total_batches"] if trials else 0

    _wait_for(lambda: first_trial_batches() >= 2, "the first trial to train")
    killed = exp.list_trials()[0]
    killed.kill()
    assert exp.wait(interval=0.2) == ExperimentState.COMPLETED
    first, second = exp.list_trials()
    assert first.id == killed.id and first.state == client.TrialState.CANCELED
    assert second.state == client.TrialState.COMPLETED
    rows = {t["id"]: t for t in store.trials.list(exp.id)}
    assert rows[first.id]["total_batches"] < 12 and rows[second.id]["total_batches"] == 12
    w12 = closed_form(second.hparams["lr"], 12, batch_size=2, n=8)[-1]
    last = list(second.iter_metrics("validation"))[-1]
    assert last.steps_completed == 12
    assert last.metrics["val_loss"] == pytest.approx(val_loss(w12, 4), rel=1e-9)
    killed.kill()  # an ended trial: nothing to do
    assert store.trials.list(exp.id)[0]["state"] == "CANCELED"
