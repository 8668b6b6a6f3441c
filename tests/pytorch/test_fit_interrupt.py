"""Ctrl-C in a plain-Python ``Trainer.fit`` (a script run from a shell), handled as the CLI does:
the first stops the run at its next report with a checkpoint, records it PAUSED and says how to
resume, and the script ends with status 1 and no traceback; a second interrupts at once. Real
subprocesses and real SIGINTs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import pytest

from determined_lite.store import Store
from tests.cli_helpers import REPO
from tests.timing import budget

SCRIPT = """
from determined_lite import pytorch
from tests.fixtures.experiments.linear.model_def import LinearTrial
conf = {"searcher": {"metric": "val_loss"}, "reproducibility": {"experiment_seed": 3}}
hparams = {"global_batch_size": 2, "lr": 0.001, "dataset_size": 8, "val_size": 4, **%(extra)r}
with pytorch.init(hparams=hparams, exp_conf=conf) as ctx:
    pytorch.Trainer(LinearTrial(ctx), ctx).fit(
        max_length=pytorch.Batch(%(length)d),
        validation_period=pytorch.Batch(4),
        reporting_period=pytorch.Batch(4),
        latest_checkpoint=%(latest)r,
    )
print("after fit")
"""

PAUSED = re.compile(
    r"local experiment (\d+) PAUSED: stopped at batch (\d+); resume from batch (\d+) with "
    r"fit\(latest_checkpoint='(.+)'\)"
)


def _start(extra: Dict[str, Any], length: int, latest: Optional[str] = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
    env.pop("DET_LITE_PROGRESS", None)
    script = SCRIPT % {"extra": extra, "length": length, "latest": latest}
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_until(proc: subprocess.Popen, start: str) -> List[str]:
    """The lines ``proc`` printed up to the first that starts with ``start`` (included)."""
    seen: List[str] = []
    assert proc.stdout is not None
    while not seen or not seen[-1].startswith(start):
        out = proc.stdout.readline()
        assert out, f"the run ended before {start!r}: {seen}"
        seen.append(out.rstrip("\n"))
    return seen


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ctrl_c_stops_at_a_checkpoint_and_says_how_to_resume(_det_lite_home):
    proc = _start({"sleep_s": 0.02}, length=5000)
    before = _read_until(proc, "batch 8 training: ")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=budget(60))
    lines = before + out.splitlines()

    assert proc.returncode == 1, err  # as `det-lite experiment create` after a pause
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "after fit" not in lines  # the script ended at fit
    (notice,) = [line for line in lines if line.startswith("Ctrl-C")]
    match = re.fullmatch(
        r"Ctrl-C: stopping at the next report \(batch (\d+)\) with a checkpoint; Ctrl-C again to stop now",
        notice,
    )
    assert match, notice
    last = PAUSED.fullmatch(lines[-1])
    assert last, lines[-1]
    eid, stopped, resume_at, path = int(last[1]), int(last[2]), int(last[3]), last[4]
    assert eid == 1 and stopped == resume_at == int(match[1]) and stopped % 4 == 0
    assert os.path.isdir(path)
    exp = Store().experiments.describe(1)
    assert exp["state"] == "PAUSED" and exp["trials"][0]["state"] == "PAUSED" and exp["pid"] is None

    # What the line says works: the next run continues from that batch.
    again = _start({}, length=stopped + 4, latest=path)
    out, err = again.communicate(timeout=budget(100))
    assert again.returncode == 0, err
    training = [line for line in out.splitlines() if " training: " in line]
    assert training[0].startswith(f"batch {stopped + 4} training")
    assert "local experiment 2 COMPLETED: det-lite checkpoint list --experiment 2" in out
    assert out.splitlines()[-1] == "after fit"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_second_ctrl_c_stops_at_once(_det_lite_home):
    # Batch 6 hangs: the first Ctrl-C waits for the report at batch 8, the second cannot.
    proc = _start({"sleep_s": 0.05, "hang_at": 5}, length=100)
    _read_until(proc, "batch 4 validation: ")
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=budget(60))
    assert time.monotonic() - started < budget(30)  # not the hour batch 6 would take
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    last = PAUSED.fullmatch(out.splitlines()[-1])
    assert last, out
    # Stopped in batch 6 (5 done); the checkpoint after the validation at batch 4 is the latest.
    assert (last[2], last[3]) == ("5", "4") and os.path.isdir(last[4])
    assert Store().experiments.describe(1)["state"] == "PAUSED"
