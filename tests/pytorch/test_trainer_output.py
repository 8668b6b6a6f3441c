"""What a plain-Python ``Trainer.fit`` (a notebook or script user) sees: a progress bar and one
line per report on stdout, the local experiment it was recorded as; ``progress=False`` or
``$DET_LITE_PROGRESS=0`` keep it quiet. Read through a pseudo-terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List

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


def _without_a_terminal(code: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    """Run ``code`` as ``python3 -c`` with stdout and stderr captured (a log file, a CI job)."""
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(), cwd=cwd, capture_output=True, text=True, timeout=budget(100)
    )


@pytest.mark.timeout(120)
def test_a_terminal_shows_the_bar_and_metric_lines(_det_lite_home):
    run = run_in_pty([sys.executable, "-c", SCRIPT % ""], width=WIDTH, env=_env(), cwd=REPO)
    screen = run.screen
    assert run.returncode == 0, "\n".join(screen)
    assert screen[: len(EXPECTED_LINES)] == EXPECTED_LINES
    bar = screen[len(EXPECTED_LINES)]
    # The bar's last state stays: label, 8 of 8 batches, throughput, the latest report's loss (the
    # line above says 1.114, the period's mean) and metric.
    assert re.fullmatch(
        r"LinearTrial: 100%\|█+\| 8/8 \[\d\d:\d\d<00:00, [\d.]+ batch/s, loss=1\.114, val_loss=0\.9472\]", bar
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
    proc = _without_a_terminal(SCRIPT % "")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout and "\r" not in proc.stdout  # no bar drawing in a log file
    assert render(proc.stdout, WIDTH) == EXPECTED_LINES + [
        "local experiment 1 COMPLETED: det-lite checkpoint list --experiment 1"
    ]


CALLBACKS_SCRIPT = """
from determined_lite import pytorch
from determined_lite.pytorch.callbacks import EarlyStopping, ModelSummary
from tests.fixtures.experiments.linear.model_def import LinearTrial
conf = {"searcher": {"metric": "val_loss"}, "reproducibility": {"experiment_seed": 3}}
hparams = {"global_batch_size": 2, "lr": 0.03, "dataset_size": 8, "val_size": 4}
with pytorch.init(hparams=hparams, exp_conf=conf) as ctx:
    callbacks = [ModelSummary(), EarlyStopping("val_loss", patience=1)]
    pytorch.Trainer(LinearTrial(ctx), ctx, callbacks=callbacks).fit(
        max_length=pytorch.Batch(8), validation_period=pytorch.Batch(2), reporting_period=pytorch.Batch(2)
    )
"""


@pytest.mark.timeout(120)
def test_model_summary_and_early_stopping_say_what_they_did(_det_lite_home):
    # As Lightning's: the summary before training, and why training stopped early (val_loss
    # went from 1.355 at batch 2 to 5.331 at batch 4), among the run's own lines.
    proc = _without_a_terminal(CALLBACKS_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        EXPECTED_LINES[0],
        "model 0 (Linear): 1 parameters, 1 trainable, 0 frozen, 0.00 MB",
        *EXPECTED_LINES[1:5],
        "EarlyStopping: val_loss did not improve on 1.355 by more than 0 (mode min) in the last 1 "
        "validation(s); stopping at batch 4",
        "local experiment 1 COMPLETED at batch 4 (the trial asked to stop): "
        "det-lite checkpoint list --experiment 1",
    ]


def _readme_section(title: str) -> List[str]:
    """The code blocks of README.md's section ``title``, in order."""
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", section, re.S)


@pytest.mark.timeout(120)
def test_the_readme_minimal_trial_prints_what_the_readme_shows(_det_lite_home, tmp_path):
    code, shown = _readme_section("A minimal trial")[:2]
    proc = _without_a_terminal(code, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
    assert proc.stderr == ""  # no warning about a setting the example never made
