"""What the terminal and the store tell after a search, at 80 columns (issue 29.10, 29.11).

At 80 columns a search over 3 hyperparameters wrapped the summary's rows and cut finished
progress lines inside a label and a value (``trial 10 l…:``, ``val_loss=0.…``); ``describe``
showed ASHA-stopped trials as COMPLETED and every trial with the experiment's start time;
``experiment logs -f`` of a detached run ended without the summary a foreground run prints.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.cli_helpers import REPO, asha_overrides, cli, describe, write_config
from tests.pty_helpers import run_in_pty

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
WIDTH = 80

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _asha_config(tmp_path) -> str:
    return write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **asha_overrides(
            **{
                "hyperparameters.hidden_size_unused": {"type": "categorical", "vals": [64, 128, 256]},
                "hyperparameters.dropout_rate_unused": {"type": "double", "minval": 0.1, "maxval": 0.5},
            }
        ),
    )


def test_asha_search_over_three_hparams_at_80_columns(tmp_path, _det_lite_home):
    run = run_in_pty(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", _asha_config(tmp_path), LINEAR],
        width=WIDTH,
        cwd=REPO,
    )
    screen = run.screen
    assert run.returncode == 0, "\n".join(screen)
    exp = describe(1)
    trials = exp["trials"]
    # Finished lines: they fit, labels and values whole (whole items may go, marked "…").
    finished = [line for line in screen if re.match(r"trial \d+ .*: 100%", line)]
    assert len(finished) >= len(trials), "\n".join(screen)  # one per run (rung)
    for line in finished:
        assert len(line) < WIDTH, line
        assert not re.search(r"[\w.=]…", line), line  # nothing cut inside a word or a number
        assert re.search(r"val_loss=[-0-9.e+]+\]$", line), line
    # The summary: best first, every value whole, then the best trial and its checkpoint.
    start = screen.index(next(line for line in screen if line.startswith("trial  state")))
    assert all(len(line) < WIDTH for line in screen[start:]), "\n".join(screen[start:])
    table = screen[start + 1 : start + 1 + len(trials)]
    stopped = {t["id"] for t in trials if t["total_batches"] < 8}
    assert stopped, trials
    for line in table:
        cells = line.split()
        assert cells[1] == ("ASHA-stopped" if int(cells[0]) in stopped else "COMPLETED"), line
    # describe: the store knows which trials ASHA stopped, and when each trial started.
    assert {t["id"] for t in trials if t["stopped_early"]} == stopped
    assert all(t["state"] == "COMPLETED" for t in trials)  # Determined's state in --json
    text = cli("experiment", "describe", "1", check=True).stdout
    section = text.split("Trials:")[1].split("Workloads:")[0]
    rows = {int(line.split()[0]): line for line in section.splitlines() if re.match(r"\s*\d+ +\| ", line)}
    for t in trials:
        assert ("ASHA-stopped" in rows[t["id"]]) == (t["id"] in stopped), rows[t["id"]]
    first, *later = sorted(trials, key=lambda t: t["id"])
    assert all(t["started_at"] >= t["created_at"] for t in trials)
    assert max(t["started_at"] for t in later) > first["started_at"] + 0.5  # waited for a slot


def test_logs_follow_after_detach_ends_with_the_summary(tmp_path, _det_lite_home):
    config = write_config(
        os.path.join(LINEAR, "const.yaml"), tmp_path, **{"searcher.max_length": {"batches": 4}}
    )
    cli("experiment", "create", config, LINEAR, "--detach", check=True)
    lines = cli("experiment", "logs", "-f", "1", check=True).stdout.splitlines()
    followed = [line.removeprefix("[experiment 1] ") for line in lines]
    (trial,) = describe(1)["trials"]
    ckpt = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    assert followed[-1] == "experiment 1 COMPLETED", followed
    assert followed[-2] == f"best checkpoint: {ckpt['uuid']} (batch 4)", followed
    assert followed[-3].startswith("best trial: 1, val_loss = "), followed
    assert followed[-5].split()[:3] == ["trial", "state", "batches"], followed
