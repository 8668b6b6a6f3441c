"""An unmanaged run (Determined's ``core_v2`` outside det-lite's runner), in this process: the
experiment and trial it records in the store, what its Core API calls write there, how it ends
(COMPLETED, ERROR, CANCELED), resuming with Determined's external ids, one writer per experiment.

Before: ``determined.experimental.core_v2`` did not exist."""

from __future__ import annotations

import glob
import os
from typing import Any

import pytest

from determined_lite.client import _core_v2 as core_v2
from determined_lite.config import ConfigError
from determined_lite.experiment._control import control_experiment
from determined_lite.experiment._unmanaged import UnmanagedRunError
from determined_lite.store import Action, Store


def _config(**kwargs: Any) -> core_v2.Config:
    return core_v2.Config(name="unmanaged-test", **kwargs)


def _storage(tmp_path: Any) -> str:
    return str(tmp_path / "ckpts")


def test_a_run_is_recorded_with_its_metrics_checkpoint_and_tensorboard_files(
    tmp_path: Any, _det_lite_home: Any
) -> None:
    config = _config(
        hparams={"lr": 0.5},
        labels=["b", "a"],
        description="two steps",
        searcher={"name": "single", "metric": "loss"},
        checkpoint_storage=_storage(tmp_path),
    )
    with core_v2.init_context(config=config) as ctx:
        store = Store()
        (exp,) = store.experiments.list()
        assert (exp["kind"], exp["state"], exp["running"]) == ("unmanaged", "ACTIVE", True)
        assert exp["pid"] == os.getpid()  # the script is the experiment's driver
        assert ctx.info.trial.experiment_id == exp["id"] and ctx.info.latest_checkpoint is None
        for step in (1, 2):
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        ctx.train.report_validation_metrics(steps_completed=2, metrics={"loss": 0.25})
        with ctx.checkpoint.store_path({"steps_completed": 2}) as (path, uuid):
            (path / "state").write_text("2")
        tensorboard = str(ctx.train.get_tensorboard_path())
    exp = store.experiments.get(exp["id"])
    assert (exp["state"], exp["pid"], exp["config"]["description"]) == ("COMPLETED", None, "two steps")
    assert Store(store.path).experiments.annotations(exp["id"])["labels"] == ["a", "b"]
    from determined_lite import client  # Determined's SDK sees what Determined's would

    sdk = client.get_experiment(exp["id"])
    assert (sdk.name, sdk.description, sdk.labels) == ("unmanaged-test", "two steps", {"a", "b"})
    (trial,) = store.trials.list(exp["id"])
    assert (trial["state"], trial["hparams"], trial["best_validation"]) == ("COMPLETED", {"lr": 0.5}, 0.25)
    assert [(m["total_batches"], m["metrics"]) for m in store.metrics.training(trial["id"])] == [
        (1, {"loss": 1.0}),
        (2, {"loss": 0.5}),
    ]
    (ckpt,) = store.checkpoints.list(trial_id=trial["id"])
    assert ckpt["uuid"] == uuid and ckpt["path"] == os.path.join(_storage(tmp_path), uuid)
    with open(os.path.join(ckpt["path"], "state")) as f:
        assert f.read() == "2"
    ids = f"experiment_{exp['id']}", f"trial_{trial['id']}"
    assert tensorboard == os.path.join(str(_det_lite_home), "tensorboard", *ids)
    assert glob.glob(os.path.join(tensorboard, "events.out.tfevents.*"))


def test_an_exception_inside_init_context_ends_it_in_error(_det_lite_home: Any) -> None:
    with pytest.raises(KeyError):
        with core_v2.init_context(config=_config()) as ctx:
            ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
            raise KeyError("inside")
    store = Store()
    (exp,) = store.experiments.list()
    assert (exp["state"], exp["pid"]) == ("ERROR", None)
    assert [t["state"] for t in store.trials.list(exp["id"])] == ["ERROR"]


def test_a_kill_from_another_terminal_is_what_should_preempt_answers(
    _det_lite_home: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr("determined_lite.core._preempt.POLL_S", 0.0)  # the store is asked each call
    with core_v2.init_context(config=_config()) as ctx:
        store = Store()
        assert ctx.preempt.should_preempt() is False
        (exp,) = store.experiments.list()
        assert "Requested kill" in control_experiment(store, exp["id"], Action.KILL)[0]
        assert ctx.preempt.should_preempt() is True
    exp = store.experiments.get(exp["id"])
    assert (exp["state"], exp["requested_action"]) == ("CANCELED", None)


def _resumable(step: int, **ids: Any) -> int:
    """One run with external ids: checkpoint at ``step``; the step it started from."""
    with core_v2.init_context(config=_config(**ids)) as ctx:
        start = 0
        if ctx.info.latest_checkpoint is not None:
            with ctx.checkpoint.restore_path(ctx.info.latest_checkpoint) as path:
                start = int((path / "state").read_text())
        ctx.train.report_training_metrics(steps_completed=step, metrics={"x": float(step)})
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "state").write_text(str(step))
    return start


def test_external_ids_resume_the_trial_from_its_latest_checkpoint(_det_lite_home: Any) -> None:
    ids = {"external_experiment_id": "exp-a", "external_trial_id": "trial-a"}
    assert _resumable(10, **ids) == 0
    assert _resumable(20, **ids) == 10  # Determined's PutTrial + StartTrial(resume=True)
    assert _resumable(5, external_experiment_id="exp-a") == 0  # a new trial of that experiment
    assert _resumable(7) == 0  # no ids: a new experiment
    store = Store()
    first, second = store.experiments.list()
    assert (first["state"], first["config"]["external_experiment_id"]) == ("COMPLETED", "exp-a")
    trials = store.trials.list(first["id"])
    assert [t["total_batches"] for t in trials] == [20, 5]
    assert [m["total_batches"] for m in store.metrics.training(trials[0]["id"])] == [10, 20]
    assert [t["total_batches"] for t in store.trials.list(second["id"])] == [7]


def test_an_experiment_has_one_writer(_det_lite_home: Any) -> None:
    ids = {"external_experiment_id": "exp-b", "external_trial_id": "t"}
    with core_v2.init_context(config=_config(**ids)):
        running = r"experiment 1 \(external id 'exp-b'\) is run by process"
        with pytest.raises(UnmanagedRunError, match=running):
            core_v2.init_context(config=_config(**ids))
    with pytest.raises(UnmanagedRunError, match="external_trial_id needs external_experiment_id"):
        core_v2.init_context(config=_config(external_trial_id="t"))
    assert len(Store().experiments.list()) == 1


def test_a_bad_config_is_one_line_and_records_nothing(_det_lite_home: Any) -> None:
    with pytest.raises(ConfigError, match=r"^core_v2.Config: searcher.metric: "):
        core_v2.init_context(config=_config(searcher={"name": "single"}))
    assert Store().experiments.list() == []


def test_activate_refuses_an_unmanaged_experiment(_det_lite_home: Any) -> None:
    from determined_lite.experiment import activate_experiment
    from determined_lite.experiment._exit import ActivationRefused

    with core_v2.init_context(config=_config()):
        pass
    with pytest.raises(ActivationRefused, match="^experiment 1 is an unmanaged run of a Core API script"):
        activate_experiment(1)
    assert Store().experiments.get(1)["state"] == "COMPLETED"


@pytest.mark.slow
def test_a_script_killed_before_closing_is_shown_not_running_and_can_be_killed(
    tmp_path: Any, _det_lite_home: Any
) -> None:
    # SIGKILL leaves no chance to record the end: the recorded pid is dead, `experiment list`
    # says so, and `experiment kill` (no running process) ends it CANCELED.
    import subprocess
    import sys

    from tests.cli_helpers import REPO, cli
    from tests.timing import budget

    script = tmp_path / "dies.py"
    script.write_text(
        "import os, signal\n"
        "from determined.experimental import core_v2\n"
        "core_v2.init(config=core_v2.Config(name='dies'))\n"
        "core_v2.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path), timeout=budget(120))
    assert proc.returncode == -9
    # Its process is gone: the next command that reads it finds it PAUSED (issue 40, item 4).
    assert "dies (unmanaged) | PAUSED" in cli("experiment", "list", check=True).stdout
    assert "had no running process; it is now CANCELED" in cli("experiment", "kill", "1", check=True).stdout
    store = Store()
    (trial,) = store.trials.list(1)
    assert store.experiments.get(1)["state"] == "CANCELED"
    assert (trial["state"], trial["total_batches"]) == ("CANCELED", 1)
