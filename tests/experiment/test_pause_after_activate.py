"""A pause right after ``activate`` is honoured (issue 28.4).

``activate --detach`` returned while the store still said PAUSED: a ``pause`` 0–0.5 s later
printed "already PAUSED; nothing to do" and the run went on to COMPLETED. The state a command
reports must be the state the runner honours, detached or not.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.cli_helpers import REPO, cli, describe
from tests.experiment.test_runner_lock import _paused_experiment
from tests.timing import budget

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _wait_until_stopped(experiment_id: int = 1) -> str:
    deadline = time.monotonic() + budget(120)
    while time.monotonic() < deadline:
        exp = describe(experiment_id)
        if exp["state"] != "ACTIVE" and not exp.get("running"):
            return exp["state"]
        time.sleep(0.2)
    raise AssertionError("the experiment did not stop")


@pytest.mark.parametrize("delay_s", [0.0, 0.5])
def test_pause_right_after_activate_detach_pauses(tmp_path, delay_s):
    _paused_experiment(tmp_path)
    cli("experiment", "activate", "1", "--detach", check=True)
    time.sleep(delay_s)
    paused = cli("experiment", "pause", "1", check=True)
    assert "nothing to do" not in paused.stdout, paused.stdout
    assert paused.stdout.startswith("Requested pause of experiment 1"), paused.stdout
    assert _wait_until_stopped() == "PAUSED"


def test_pause_right_after_foreground_activate_pauses(tmp_path):
    _paused_experiment(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "activate", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "Activating experiment 1"
    paused = cli("experiment", "pause", "1", check=True)
    assert paused.stdout.startswith("Requested pause of experiment 1"), paused.stdout
    out, _ = proc.communicate(timeout=budget(120))
    assert proc.returncode == 1, out
    assert describe(1)["state"] == "PAUSED"
