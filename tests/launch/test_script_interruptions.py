"""Pause → activate and SIGKILL → activate of script trials equal an uninterrupted run; 2 slots
on both engines reach the 1-slot numbers.

Both fixture scripts (``tests/fixtures/determined_scripts``) follow the closed form of
``tests/compat/test_determined_trial.py`` (gamma 1), so "equal" is checked against it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Dict

import pytest

from tests.cli_helpers import REPO, cli, describe, wait_for_batches
from tests.cli_helpers import write_config as _write_config
from tests.compat.test_determined_trial import weights
from tests.timing import budget

SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
TD = ["python3", "-m", "determined.launch.torch_distributed"]
HVD = ["python3", "-m", "determined.launch.horovod", "--autohorovod"]

pytestmark = pytest.mark.timeout(300)


def val_loss(w: float) -> float:
    return 11 * (w - 2) ** 2


def core_config(tmp_path: Any, **changes: Any) -> str:
    return _write_config(os.path.join(SCRIPTS, "core.yaml"), tmp_path, **changes)


def trainer_config(tmp_path: Any, **changes: Any) -> str:
    return _write_config(os.path.join(SCRIPTS, "trainer.yaml"), tmp_path, **changes)


def start(path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, SCRIPTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def assert_core_closed_form(trial: Dict[str, Any], batches: int) -> None:
    """The Core script: training metrics at every batch, one validation at the end."""
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == batches
    ws = weights(batches, gamma=1.0)
    assert [t["total_batches"] for t in trial["training_metrics"]] == list(range(1, batches + 1))
    for t in trial["training_metrics"]:
        assert t["metrics"]["weight"] == pytest.approx(ws[t["total_batches"] - 1], rel=1e-12)
    (v,) = trial["validation_metrics"]
    assert v["total_batches"] == batches
    assert v["metrics"]["val_loss"] == pytest.approx(val_loss(ws[-1]), rel=1e-12)


def assert_trainer_closed_form(trial: Dict[str, Any], batches: int) -> None:
    """The Trainer script: training metrics every 2 batches (scheduling_unit), validation every 4."""
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == batches
    ws = weights(batches, gamma=1.0)
    assert [t["total_batches"] for t in trial["training_metrics"]] == list(range(2, batches + 1, 2))
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)
    assert [v["total_batches"] for v in trial["validation_metrics"]] == list(range(4, batches + 1, 4))
    for v in trial["validation_metrics"]:
        w = ws[v["total_batches"] - 1]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w), rel=1e-9)


SLOW_CORE = {"hyperparameters.sleep": 0.1, "searcher.max_length": {"batches": 24}}
SLOW_TRAINER = {"hyperparameters.sleep": 0.1, "searcher.max_length": {"batches": 24}}


@pytest.mark.parametrize("kind", ["core", "trainer"])
def test_pause_then_activate_equals_uninterrupted(tmp_path, kind):
    """``det-lite experiment pause``: the Core script's ``should_preempt()`` turns true (it
    checkpoints and returns), the Trainer script's fit stops at a checkpoint; ``activate``
    resumes from it and every metric is the uninterrupted run's."""
    path = core_config(tmp_path, **SLOW_CORE) if kind == "core" else trainer_config(tmp_path, **SLOW_TRAINER)
    proc = start(path)
    wait_for_batches(1, 6, proc)
    cli("experiment", "pause", "1", check=True)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    exp = describe(1)
    assert exp["state"] == "PAUSED"
    (trial,) = exp["trials"]
    assert trial["state"] == "PAUSED" and 6 <= trial["total_batches"] < 24
    paused_at = max(c["total_batches"] for c in trial["checkpoints"])
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    logs = cli("trial", "logs", str(trial["id"])).stdout
    if kind == "core":
        assert_core_closed_form(trial, 24)
        (restored,) = re.findall(r"core: restored [0-9a-f-]{36} at (\d+)", logs)
        assert int(restored) == paused_at
    else:
        assert_trainer_closed_form(trial, 24)
        assert f"(batch {paused_at})" in logs


@pytest.mark.parametrize("kind", ["core", "trainer"])
def test_sigkill_then_activate_equals_uninterrupted(tmp_path, kind):
    path = core_config(tmp_path, **SLOW_CORE) if kind == "core" else trainer_config(tmp_path, **SLOW_TRAINER)
    path = _write_config(path, tmp_path, name="ckpt.yaml", **{"min_checkpoint_period": {"batches": 4}})
    proc = start(path)
    wait_for_batches(1, 9, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    time.sleep(3)  # the workers notice their supervisor is gone and stop on their own
    assert describe(1)["state"] in ("ACTIVE", "PAUSED")  # PAUSED once its trial's processes exited
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    if kind == "core":
        assert_core_closed_form(trial, 24)
    else:
        assert_trainer_closed_form(trial, 24)


# Determined >= 0.38: no searcher length; the script's fit(max_length=Epoch(epochs)) is the length.
OWN_LENGTH_SEARCHER = {"name": "single", "metric": "val_loss"}


def test_a_script_with_its_own_length_resumes_to_it_after_a_pause(tmp_path):
    """Issue 40, item 3: activate resumed nothing and ended the trial COMPLETED where it paused
    ("at its target already"); the chief reports fit's length, and the trial resumes to it."""
    path = trainer_config(
        tmp_path, searcher=OWN_LENGTH_SEARCHER, **{"hyperparameters.sleep": 0.1, "hyperparameters.epochs": 6}
    )
    proc = start(path)
    wait_for_batches(1, 6, proc)
    cli("experiment", "pause", "1", check=True)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "PAUSED" and 6 <= trial["total_batches"] < 24
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "at its target already" not in proc.stdout
    (trial,) = describe(1)["trials"]
    assert_trainer_closed_form(trial, 24)  # 6 epochs of 4 batches


def test_a_script_with_its_own_length_failing_once_completes_at_its_fit_length(tmp_path):
    """Issue 40, item 3: a restart ended the trial COMPLETED at its checkpoint (batch 4); now it
    resumes from there to fit's 3 epochs, every metric the uninterrupted run's."""
    marker = str(tmp_path / "failed-once")
    path = trainer_config(
        tmp_path,
        searcher=OWN_LENGTH_SEARCHER,
        max_restarts=1,
        min_checkpoint_period={"batches": 4},
        **{"hyperparameters.epochs": 3, "hyperparameters.fail_once_at": 6},
        **{"hyperparameters.fail_marker": marker},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.path.exists(marker)  # it did fail once
    (trial,) = describe(1)["trials"]
    assert trial["restarts"] == 1
    assert_trainer_closed_form(trial, 12)
    logs = cli("trial", "logs", str(trial["id"])).stdout
    assert "trial 1 failed: rank 0: RuntimeError: injected failure at batch 6" in logs, logs
    assert "restarting trial 1 from its latest checkpoint (batch 4) (1/1)" in logs, logs
    assert "at its target already" not in logs


def test_kill_cancels_a_core_script(tmp_path):
    proc = start(core_config(tmp_path, **SLOW_CORE))
    wait_for_batches(1, 2, proc)
    cli("experiment", "kill", "1", check=True)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    exp = describe(1)
    assert exp["state"] == "CANCELED" and exp["trials"][0]["state"] == "CANCELED"


ENGINES = {"torch": TD, "horovod": HVD}


@pytest.mark.parametrize("engine", ["torch", "horovod"])
@pytest.mark.parametrize("kind", ["core", "trainer"])
def test_two_slots_on_each_engine_equal_one_slot(tmp_path, kind, engine):
    """Two workers under the engine's own launcher (Gloo, this machine): the Core script
    averages its gradients with ``distributed.allgather``, the Trainer script's per-slot batch
    is 1; both reach the 1-slot closed form."""
    script = ["python3", "core_train.py"] if kind == "core" else ["python3", "train.py"]
    changes: Dict[str, Any] = {
        "entrypoint": ENGINES[engine] + script,
        "resources.slots_per_trial": 2,
        "hyperparameters.distributed": engine,
        "searcher.max_length": {"batches": 8},
    }
    path = core_config(tmp_path, **changes) if kind == "core" else trainer_config(tmp_path, **changes)
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["config"]["resources"]["distributed_backend"] == engine
    (trial,) = exp["trials"]
    logs = cli("trial", "logs", str(trial["id"])).stdout
    assert "[rank 1] " in logs  # two workers ran the script
    if kind == "core":
        assert_core_closed_form(trial, 8)
    else:
        assert_trainer_closed_form(trial, 8)
