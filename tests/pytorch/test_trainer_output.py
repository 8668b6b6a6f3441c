"""What a plain-Python ``Trainer.fit`` (a notebook or script user) sees: a progress bar and one
line per report on stdout, the local experiment it was recorded as; ``progress=False`` or
``$DET_LITE_PROGRESS=0`` keep it quiet. Read through a pseudo-terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.cli_helpers import REPO
from tests.pty_helpers import render, run_in_pty
from tests.timing import budget

SCRIPT = """
from determined_lite import pytorch
from tests.fixtures.experiments.linear.model_def import LinearTrial
conf = {"searcher": {"metric": "val_loss"}, "reproducibility": {"experiment_seed": 3}}
hparams = {"global_batch_size": 2, "lr": 0.03, "dataset_size": 8, "val_size": 4}
with pytorch.init(hparams=hparams, exp_conf=conf) as ctx:
    pytorch.Trainer(LinearTrial(ctx), ctx).fit(
        max_length=pytorch.Batch(8), validation_period=pytorch.Batch(2), reporting_period=pytorch.Batch(2)%s
    )
"""

WIDTH = 90
EXPECTED_LINES = [
    "recorded as local experiment 1: det-lite experiment describe 1",
    "batch 2 training: loss=23.06 weight=0.9375",
    "batch 2 validation: val_loss=1.355 weight=1.575",
    "batch 4 training: loss=6.27 weight=1.755",
    "batch 4 validation: val_loss=5.331 weight=1.157",
    "batch 6 training: loss=4.098 weight=1.552",
    "batch 6 validation: val_loss=0.2407 weight=1.821",
    "batch 8 training: loss=1.114 weight=1.897",
    "batch 8 validation: val_loss=0.9472 weight=1.645",
]


def _env(**extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, **extra)
    env.pop("DET_LITE_PROGRESS", None)
    env.update(extra)
    return env


@pytest.mark.timeout(120)
def test_a_terminal_shows_the_bar_and_metric_lines(_det_lite_home):
    run = run_in_pty([sys.executable, "-c", SCRIPT % ""], width=WIDTH, env=_env(), cwd=REPO)
    screen = run.screen
    assert run.returncode == 0, "\n".join(screen)
    assert screen[: len(EXPECTED_LINES)] == EXPECTED_LINES
    bar = screen[len(EXPECTED_LINES)]
    # The bar's last state stays: label, 8 of 8 batches, throughput, latest loss and metric.
    assert re.fullmatch(
        r"LinearTrial: 100%\|█+\| 8/8 \[\d\d:\d\d<00:00, [\d.]+ batch/s, loss=[\d.]+, val_loss=0\.9472\]", bar
    ), bar
    assert len(bar) < WIDTH
    assert screen[len(EXPECTED_LINES) + 1 :] == [
        "local experiment 1 COMPLETED: det-lite checkpoint list --experiment 1"
    ]
    # While training, the bar was redrawn under the lines (it was there before the end).
    assert run.raw.count("LinearTrial:") > 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["argument", "environment"])
def test_quiet_switch(_det_lite_home, how):
    script = SCRIPT % (", progress=False" if how == "argument" else "")
    env = _env(DET_LITE_PROGRESS="0") if how == "environment" else _env()
    run = run_in_pty([sys.executable, "-c", script], width=WIDTH, env=env, cwd=REPO)
    assert run.returncode == 0 and run.screen == [], run.screen


@pytest.mark.timeout(120)
def test_without_a_terminal_lines_only(_det_lite_home):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT % ""],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=budget(100),
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout and "\r" not in proc.stdout  # no bar drawing in a log file
    assert render(proc.stdout, WIDTH) == EXPECTED_LINES + [
        "local experiment 1 COMPLETED: det-lite checkpoint list --experiment 1"
    ]
