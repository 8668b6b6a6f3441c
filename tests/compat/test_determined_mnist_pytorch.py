"""Determined 0.38.1's mnist_pytorch tutorial and its e2e ``mnist_pytorch`` fixtures, as shipped
(tests/fixtures/determined_038/, Determined's directory layout: the e2e fixture's data.py,
model.py and train.py are links into the tutorial), through ``det-lite experiment create CONFIG
DIR`` as a user runs them, and Determined's SDK over the finished search (issue 30, "Done
when"). Data: scikit-learn's digits drawn as 1x28x28 images (the only edit to the tutorial's
code; see the fixtures' README), 24 batches of 64 per epoch.

Before: a checkpoint of a trial class defined in the script (``python3 train.py``) recorded
``__main__:MNistTrial``, which no later process can import, so
``load_trial_from_checkpoint_path(path)`` failed; and a script's ``Trainer.fit(...,
profiling_enabled=True)`` profiled nothing in an experiment (const-profiling.yaml wrote no trace).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List

import pytest
import torch

from tests.cli_helpers import describe, write_config
from tests.compat.test_alias_pth import env_with_pth
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(REPO, "tests", "fixtures", "determined_038")
TUTORIAL = os.path.join(BASE, "examples", "tutorials", "mnist_pytorch")
E2E = os.path.join(BASE, "e2e_tests", "tests", "fixtures", "mnist_pytorch")
LINKS = ("data.py", "model.py", "train.py")
UNTRAINED_LOSS = math.log(10)  # NLL of a uniform guess over 10 digits

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Home:
    """``det-lite`` commands against one ``$DET_LITE_HOME`` (shared by a module's tests)."""

    def __init__(self, path: str, **env: str) -> None:
        self.path = path
        self.env = dict(os.environ, DET_LITE_HOME=path, DET_LITE_PROGRESS="0", **env)
        self.env.setdefault("DET_LITE_DEVICES", "")  # slots are cores, as in tests/conftest.py

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "determined_lite.cli", *args],
            capture_output=True,
            text=True,
            timeout=budget(timeout),
            cwd=REPO,
            env=self.env,
        )

    def create(self, config: str, context: str) -> subprocess.CompletedProcess:
        return self.cli("experiment", "create", config, context)

    def describe(self, exp_id: int = 1) -> Dict[str, Any]:
        """The experiment with its trials and records (``experiment describe --json`` prints
        Determined's form, the experiment alone)."""
        return describe(exp_id, home=self.path)

    def logs(self, trial_id: int = 1) -> str:
        return self.cli("trial", "logs", str(trial_id), timeout=60).stdout


def run(tmp_path_factory: Any, name: str, config: str, context: str, **env: str) -> Any:
    home = Home(str(tmp_path_factory.mktemp(name) / "home"), **env)
    proc = home.create(config, context)
    return home, proc, home.describe(1)


def validations(trial: Dict[str, Any]) -> List[Any]:
    return [(v["total_batches"], v["metrics"]) for v in trial["validation_metrics"]]


def saved_state(checkpoint_path: str) -> Dict[str, Any]:
    return torch.load(os.path.join(checkpoint_path, "state_dict.pth"), weights_only=True)


# --- the tutorial's four configs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: Any) -> Any:
    return run(tmp_path_factory, "adaptive", os.path.join(TUTORIAL, "adaptive.yaml"), TUTORIAL)


def test_const_trains_one_trial_to_one_epoch(tmp_path_factory: Any) -> None:
    home, proc, exp = run(tmp_path_factory, "const", os.path.join(TUTORIAL, "const.yaml"), TUTORIAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exp["name"] == "mnist_pytorch_const" and exp["state"] == "COMPLETED"
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24  # --epochs 1: 1,536 / 64
    # validation_period=Batch(100) is past the epoch: one validation, at the end of training.
    ((batches, metrics),) = validations(trial)
    assert batches == 24 and set(metrics) == {"validation_loss", "accuracy"}
    assert metrics["validation_loss"] < UNTRAINED_LOSS / 2 and metrics["accuracy"] > 0.5
    assert trial["hparams"] == {
        "learning_rate": 1.0, "n_filters1": 32, "n_filters2": 64, "dropout1": 0.25, "dropout2": 0.5
    }


def test_adaptive_asha_search_completes(adaptive: Any) -> None:
    home, proc, exp = adaptive
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = exp["trials"]
    assert len(trials) == 4 and all(t["state"] == "COMPLETED" for t in trials)
    # max_time 24 batches, divisor 4: rungs at 6 and 24; a trial ASHA stops ends at the rung.
    for t in trials:
        assert [b for b, _ in validations(t)][-1] == t["total_batches"] in (6, 24)
        assert t["stopped_early"] == (t["total_batches"] == 6)
        assert 0.0001 <= t["hparams"]["learning_rate"] <= 1.0 and 8 <= t["hparams"]["n_filters1"] <= 64
    assert any(t["total_batches"] == 24 for t in trials)
    assert any(t["stopped_early"] for t in trials)


def test_distributed_trains_on_two_slots_of_torch_distributed(tmp_path_factory: Any) -> None:
    # `python3 -m determined.launch.torch_distributed python3 train.py --epochs 1` on 2 slots
    # (Determined's: 8): one worker per slot on Gloo, each of per-slot batch 64 // 2 = 32, so an
    # epoch is still 24 global batches of 64.
    home, proc, exp = run(
        tmp_path_factory, "distributed", os.path.join(TUTORIAL, "distributed.yaml"), TUTORIAL
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24
    # torch.distributed with no device: det-lite's torch engine on Gloo.
    assert trial["runs"][0]["slots"] == 2 and trial["runs"][0]["devices"] == []
    ((batches, metrics),) = validations(trial)
    assert batches == 24 and metrics["validation_loss"] < UNTRAINED_LOSS / 2
    checkpoint = trial["checkpoints"][-1]["path"]
    with open(os.path.join(checkpoint, "metadata.json")) as f:
        resources = json.load(f)["experiment_config"]["resources"]
    assert resources["launcher"] == "determined.launch.torch_distributed"
    assert resources["distributed_backend"] == "torch"
    state = saved_state(checkpoint)
    assert state["trainer"]["world_size"] == 2 and len(state["rng"]) == 2  # both workers' RNG
    logs = home.logs(trial["id"])
    assert "[rank 0]" in logs and "[rank 1]" in logs


def test_dist_random_runs_two_trials(tmp_path_factory: Any) -> None:
    home, proc, exp = run(
        tmp_path_factory, "dist_random", os.path.join(TUTORIAL, "dist_random.yaml"), TUTORIAL
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = exp["trials"]
    assert len(trials) == 2 and all(t["state"] == "COMPLETED" and t["total_batches"] == 24 for t in trials)
    assert trials[0]["hparams"] != trials[1]["hparams"]
    # searcher: accuracy with smaller_is_better: true, as Determined's config says: the best
    # trial is the one with the LOWER accuracy.
    accuracy = {t["id"]: validations(t)[-1][1]["accuracy"] for t in trials}
    best = re.search(r"best trial: (\d+)", proc.stdout)
    assert best is not None and int(best.group(1)) == min(accuracy, key=accuracy.__getitem__)


def test_local_mode_runs_train_py_as_a_plain_script(tmp_path: Any) -> None:
    # The tutorial's local mode: `python3 train.py --batches 5` in its directory (a copy: it
    # writes data/), no det-lite around it: det.get_cluster_info() is None, so it reads
    # ./const.yaml's hyperparameters itself.
    workdir = str(tmp_path / "mnist_pytorch")
    shutil.copytree(TUTORIAL, workdir)
    env = dict(env_with_pth(tmp_path), DET_LITE_HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        [sys.executable, "train.py", "--batches", "5"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=budget(300),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "batch 5 validation: validation_loss=" in out  # the final validation of fit
    assert os.path.isdir(os.path.join(workdir, "data"))  # data.py's lock directory
    assert "recorded as local experiment 1" in out


# --- the Python SDK over the finished search (issue 30, "Done when") ----------------------------


def test_top_checkpoint_of_the_search_downloads_and_loads(
    adaptive: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    home, proc, exp = adaptive
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monkeypatch.setenv("DET_LITE_HOME", home.path)
    monkeypatch.chdir(tmp_path)
    from determined_lite.compat import install_alias

    assert install_alias()
    from determined import pytorch
    from determined.experimental import client

    checkpoints = [c for t in exp["trials"] for c in t["checkpoints"]]
    best = min(checkpoints, key=lambda c: c["metrics"]["validation_loss"])  # smaller_is_better
    with pytest.warns(FutureWarning):
        top = client.get_experiment(exp["id"]).top_checkpoint()
    assert top.uuid == best["uuid"]
    path = top.download()
    assert os.path.realpath(path) == os.path.realpath(tmp_path / "checkpoints" / best["uuid"])
    # Determined's MNistTrial takes hparams as an argument: trial_kwargs, as Determined's users
    # pass them; trust=True imports train.py from the checkpoint's code/ (Determined always does).
    trial = pytorch.load_trial_from_checkpoint_path(
        path, trial_kwargs={"hparams": top.training.hparams}, trust=True
    )
    assert type(trial).__name__ == "MNistTrial" and type(trial).__module__ == "train"
    saved = saved_state(path)["context"]["models_state_dict"][0]
    loaded = trial.model.state_dict()
    assert list(loaded) == list(saved) and len(saved) == 8  # 2 conv + 2 linear layers, w and b
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
    assert saved["0.weight"].shape[0] == top.training.hparams["n_filters1"]


# --- Determined's e2e fixtures (e2e_tests/tests/fixtures/mnist_pytorch) ---------------------------


def assert_links_copied(proc: subprocess.CompletedProcess) -> None:
    """det-lite copies each link's target (outside the context) with one line naming it."""
    out = proc.stdout + proc.stderr
    for name in LINKS:
        target = os.path.join(TUTORIAL, name)
        line = f"context: {name} links outside the context directory, to {target}: its content is copied"
        assert out.count(line) == 1, out


def test_e2e_const_pytorch11(tmp_path_factory: Any) -> None:
    home, proc, exp = run(tmp_path_factory, "e2e_const", os.path.join(E2E, "const-pytorch11.yaml"), E2E)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_links_copied(proc)
    assert "ignoring Determined fields that det-lite does not use locally: bind_mounts" in proc.stderr
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 200
    # validation_period=Batch(100): at 100 and 200; lr 0.001 learns slowly, but it learns.
    (b1, first), (b2, last) = validations(trial)
    assert (b1, b2) == (100, 200) and last["validation_loss"] < first["validation_loss"]


def test_e2e_random_search(tmp_path_factory: Any) -> None:
    home, proc, exp = run(tmp_path_factory, "e2e_random", os.path.join(E2E, "random.yaml"), E2E)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_links_copied(proc)
    trials = exp["trials"]
    assert len(trials) == 3 and all(t["state"] == "COMPLETED" for t in trials)
    assert all([b for b, _ in validations(t)] == [10] for t in trials)  # --batches 10


def test_e2e_adaptive_short_and_its_checkpoint_order(tmp_path_factory: Any, monkeypatch: Any) -> None:
    home, proc, exp = run(tmp_path_factory, "e2e_adaptive", os.path.join(E2E, "adaptive_short.yaml"), E2E)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_links_copied(proc)
    trials = exp["trials"]
    assert len(trials) == 5 and all(t["state"] == "COMPLETED" for t in trials)
    # max_rungs 2, divisor 2, max_time 40: rungs at 20 and 40, aggressive mode.
    assert {t["total_batches"] for t in trials} <= {20, 40} and any(t["total_batches"] == 40 for t in trials)
    # Determined's test_end_to_end_adaptive: checkpoints sorted by the searcher metric, and the
    # reverse order reversed.
    monkeypatch.setenv("DET_LITE_HOME", home.path)
    from determined_lite.client import CheckpointSortBy, OrderBy, get_experiment

    ref = get_experiment(exp["id"])
    top_k = ref.list_checkpoints(sort_by=CheckpointSortBy.SEARCHER_METRIC, order_by=OrderBy.ASCENDING)
    losses = [c.training.validation_metrics["avgMetrics"]["validation_loss"] for c in top_k]
    assert len(top_k) >= len(trials) and losses == sorted(losses)
    reverse = ref.list_checkpoints(sort_by=CheckpointSortBy.SEARCHER_METRIC, order_by=OrderBy.DESCENDING)
    assert [c.uuid for c in reverse] == [c.uuid for c in top_k][::-1]


def test_e2e_const_profiling_writes_a_trace(tmp_path_factory: Any) -> None:
    # profiling.py: Trainer.fit(..., profiling_enabled=True) over the epoch (24 batches).
    home, proc, exp = run(tmp_path_factory, "e2e_prof", os.path.join(E2E, "const-profiling.yaml"), E2E)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24
    tensorboard = os.path.join(home.path, "tensorboard", "experiment_1", "trial_1")
    (trace,) = glob.glob(os.path.join(tensorboard, "rank0.*.pt.trace.json"))
    with open(trace) as f:
        steps = {int(n) for n in re.findall(r"ProfilerStep#(\d+)", f.read())}
    assert steps == set(range(24))


@pytest.mark.parametrize("fail_at", [None, 3])
def test_e2e_failable(tmp_path_factory: Any, fail_at: Any) -> None:
    # failable_model_def.py: 8 batches, validation every batch, checkpoint every 3; with
    # FAIL_AT_BATCH=3 train_batch raises at batch index 3 (max_restarts: 0).
    env = {} if fail_at is None else {"FAIL_AT_BATCH": str(fail_at)}
    home, proc, exp = run(tmp_path_factory, "e2e_failable", os.path.join(E2E, "failable.yaml"), E2E, **env)
    (trial,) = exp["trials"]
    if fail_at is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert trial["state"] == "COMPLETED" and [b for b, _ in validations(trial)] == list(range(1, 9))
        return
    assert proc.returncode != 0 and exp["state"] == "ERROR" and trial["state"] == "ERROR"
    assert "trial 1 failed: rank 0: Exception: failed at this batch 3" in proc.stdout + proc.stderr
    assert [b for b, _ in validations(trial)] == [1, 2, 3] and trial["total_batches"] == 3
    assert "BATCH_IDX 2 EPOCH IDX 0" in home.logs() and "BATCH_IDX 3 " not in home.logs()


def test_e2e_failable_with_a_restart_ends_as_determined_ends_it(tmp_path_factory: Any) -> None:
    # Issue 40, item 3: the config sets no searcher length (fit's Batch(8) is the length); the
    # restart from the checkpoint at batch 3 used to end the trial COMPLETED at 5 of 8 ("at its
    # target already"). As in Determined, it resumes and fails again at batch index 5, and the
    # trial ends in ERROR (Determined after max_restarts; det-lite at once, as it fails again
    # the same way).
    config = write_config(
        os.path.join(E2E, "failable.yaml"), tmp_path_factory.mktemp("failable_cfg"), max_restarts=1
    )
    home, proc, exp = run(tmp_path_factory, "e2e_failable_restart", config, E2E, FAIL_AT_BATCH="5")
    (trial,) = exp["trials"]
    assert proc.returncode != 0 and exp["state"] == "ERROR" and trial["state"] == "ERROR"
    assert trial["restarts"] == 1 and trial["total_batches"] == 5
    logs = home.logs()
    assert "restarting trial 1 from its latest checkpoint (batch 3) (1/1)" in logs, logs
    again = "trial 1 not restarted: it failed again the same way (rank 0: Exception: failed at this batch 5"
    assert again in logs, logs
    assert "at its target already" not in logs
    assert [b for b, _ in validations(trial)] == [1, 2, 3, 4, 5]


def test_e2e_distributed_stop_requested(tmp_path_factory: Any) -> None:
    # stop_requested_model_def.py calls context.set_stop_requested(True) in __init__, on 2 slots.
    # Determined's test (nightly/test_distributed.py) asks that the trial completes, with a
    # checkpoint as its last workload. det-lite stops at the first optimizer step (Determined:
    # at the first scheduling-unit boundary): one batch, then the checkpoint.
    home, proc, exp = run(
        tmp_path_factory, "e2e_stop", os.path.join(E2E, "distributed-stop-requested.yaml"), E2E
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_links_copied(proc)
    (trial,) = exp["trials"]
    assert exp["state"] == "COMPLETED" and trial["state"] == "COMPLETED"
    assert trial["total_batches"] == 1 and trial["runs"][0]["slots"] == 2
    assert [c["total_batches"] for c in trial["checkpoints"]] == [1]
    assert [m["total_batches"] for m in trial["training_metrics"]] == [1]
