"""Every trial runs in a process no other trial ran in (issue 40, item 1): trials that change
their process's global state (a third-party module configured by an environment variable at its
import, numpy's error handling and print options, an attribute of a det-lite class, torch's
default dtype) give each later trial exactly a fresh process's metrics, closed form included.

The changes are one per trial, torch's default dtype last: in the order of the issue's grid, and
so that none of them could have kept a reused worker from being reused (the removed reuse's
checks saw the dtype, and none of the others)."""

from __future__ import annotations

import os
from typing import Dict

import pytest

from tests.cli_helpers import REPO, cli, describe, own_fork_server_env

FIXTURE = os.path.join(REPO, "tests", "fixtures", "experiments", "process_state")
MEAN_SQUARES = (2.5, 12.5, 30.5, 56.5)  # mean x^2 of each batch of 2 of x = 1..8, in order
VAL_MEAN_SQUARE = 7.5  # mean x^2 of x = 1..4


def _fresh(step: int) -> Dict[str, float]:
    """What a fresh process reports for ``step``: SGD on mean((w x - 2 x)^2) from w = 0."""
    lr = 0.001 * (step + 1)
    w = 0.0
    for mean_square in MEAN_SQUARES:
        w -= lr * 2 * (w - 2) * mean_square
    return {
        "lr_used": lr,
        "weight": w,
        "val_loss": (w - 2) ** 2 * VAL_MEAN_SQUARE,
        "divide_raises": 0.0,
        "print_precision": 8.0,
        "class_marked": 0.0,
        "float32_default": 1.0,
        "forked": 1.0,
    }


def test_trials_that_change_their_process_leave_the_next_a_fresh_one(tmp_path):
    home = str(tmp_path / "home")
    pythonpath = os.pathsep.join([REPO, os.path.join(FIXTURE, "vendor")])
    env = dict(own_fork_server_env(), DET_LITE_HOME=home, PYTHONPATH=pythonpath)  # its own server
    env.pop("PROCESS_STATE_LR", None)
    cli(
        "experiment", "create", os.path.join(FIXTURE, "const.yaml"), FIXTURE, env=env, check=True, timeout=400
    )
    trials = sorted(describe(1, home=home)["trials"], key=lambda t: t["id"])
    assert [t["hparams"]["step"] for t in trials] == [0, 1, 2, 3]  # one at a time, in this order
    assert [t["state"] for t in trials] == ["COMPLETED"] * 4
    observed = [dict(t["validation_metrics"][-1]["metrics"]) for t in trials]
    assert [len(t["validation_metrics"]) for t in trials] == [1] * 4
    pids = [metrics.pop("pid") for metrics in observed]
    assert observed == [pytest.approx(_fresh(step), rel=1e-12) for step in range(4)]
    assert len(set(pids)) == 4  # four processes, one a trial
