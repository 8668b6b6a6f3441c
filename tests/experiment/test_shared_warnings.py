"""Warnings with the numbers where det-lite used to run silently (issue 29.13).

A ``global_batch_size`` larger than the dataset ran with one batch an epoch and no word; two
experiments at once oversubscribed the cores with no word. Each is said once, with the numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import REPO, cli, describe, write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_global_batch_larger_than_the_dataset_is_said_once(tmp_path, _det_lite_home):
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{"hyperparameters.global_batch_size": 16, "searcher.max_length": {"batches": 4}},
    )
    created = cli("experiment", "create", config, LINEAR, check=True)
    out = created.stdout + created.stderr
    expected = (
        "the global batch (16 records per slot x 1 slots = 16) is larger than the dataset "
        "(8 records): every training epoch is one batch of 8 records"
    )
    assert out.count(expected) == 1, out


def _first_trial_trained(home) -> bool:
    """Whether experiment 1's first trial reported training (the store may exist before the
    experiment is recorded in it)."""
    if not os.path.exists(home / "det-lite.db"):
        return False
    try:
        exp = describe(1)
    except AssertionError:  # not recorded yet
        return False
    return bool(exp["trials"]) and exp["trials"][0]["total_batches"] > 0


def test_two_experiments_at_once_say_they_share_the_cores(tmp_path, _det_lite_home):
    env = dict(os.environ, DET_LITE_SLOTS="1")
    slow = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        "slow.yaml",
        **{"hyperparameters.sleep_s": 0.3, "searcher.max_length": {"batches": 40}},
    )
    first = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", slow, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        deadline = time.monotonic() + budget(90)
        while time.monotonic() < deadline:
            if _first_trial_trained(_det_lite_home):
                break
            time.sleep(0.3)
        quick = write_config(
            os.path.join(LINEAR, "const.yaml"),
            tmp_path,
            "quick.yaml",
            **{"searcher.max_length": {"batches": 2}},
        )
        second = cli("experiment", "create", quick, LINEAR, env=env)
    finally:
        cli("experiment", "kill", "1")
        first.communicate(timeout=budget(60))
    assert second.returncode == 0, second.stdout + second.stderr
    warning = (
        "det-lite: warning: experiment 1 (1 slots) also running: with this one's 1, 2 slots in "
        "use on 1 available ($DET_LITE_SLOTS, else the cores); trials share the cores and run slower"
    )
    assert second.stdout.count(warning) == 1, second.stdout
