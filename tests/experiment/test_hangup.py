"""A foreground run whose terminal closes, and a runner that is gone (issue 40, item 4).

Before: closing the terminal of ``det-lite experiment create`` killed the runner (SIGHUP's
default action), leaving the experiment ``ACTIVE (pause requested)`` with no process behind it;
a SIGKILLed runner left it ACTIVE for good. Now SIGHUP pauses the experiment as ``experiment
pause`` does (its output goes on in ``runner.log``), and the next command that reads a record
whose runner is gone (its process dead, its runner lock free) finds it PAUSED.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from typing import Tuple

import pytest

from tests.cli_helpers import REPO, cli, describe, wait_for_batches
from tests.experiment.test_experiment_e2e import LINEAR, _assert_uninterrupted, _slow_config
from tests.timing import budget

pytestmark = pytest.mark.timeout(240)

HANGUP_LINE = (
    "the terminal closed (SIGHUP): pausing experiment 1; its trials stop at a checkpoint, and "
    "det-lite experiment activate 1 resumes it"
)


def _create(path: str, **streams: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        cwd=REPO,
        close_fds=True,
        **streams,  # type: ignore[arg-type]
    )


def _in_terminal(path: str) -> Tuple[subprocess.Popen, int, threading.Event]:
    """``experiment create`` as the controlling process of a pseudo-terminal of its own (a shell
    in a terminal window); a thread reads the terminal until the returned event is set."""
    master, slave = os.openpty()

    def take_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = _create(path, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal)
    os.close(slave)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    return

    threading.Thread(target=drain, daemon=True).start()
    return proc, master, stop


@pytest.mark.parametrize("how", ["terminal closed", "SIGHUP"])
def test_a_hangup_pauses_the_experiment_and_activate_resumes_it_exactly(tmp_path, how):
    if how == "terminal closed":
        proc, master, stop = _in_terminal(_slow_config(tmp_path))
        wait_for_batches(1, 6, proc)
        stop.set()
        time.sleep(0.3)
        os.close(master)  # the kernel hangs up the terminal: SIGHUP to its controlling process
    else:
        proc = _create(_slow_config(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_batches(1, 6, proc)
        proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=budget(60)) == 1  # paused (SIGHUP's default action: -1)
    exp = describe(1)
    (trial,) = exp["trials"]
    assert (exp["state"], exp["pid"], exp["requested_action"]) == ("PAUSED", None, None)
    assert trial["state"] == "PAUSED" and 6 <= trial["total_batches"] < 24
    # A clean pause: the trial stopped at a checkpoint where it stopped training.
    assert max(c["total_batches"] for c in trial["checkpoints"]) == trial["total_batches"]
    with open(os.path.join(os.environ["DET_LITE_HOME"], "experiments", "1", "runner.log")) as f:
        log = f.read()
    assert HANGUP_LINE in log and "experiment 1 paused; resume with: det-lite experiment activate 1" in log
    activated = cli("experiment", "activate", "1")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])


def test_a_sigkilled_runner_reads_paused_in_the_next_list_and_activates_exactly(tmp_path):
    proc = _create(_slow_config(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_batches(1, 6, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    # Its trial's processes see their supervisor gone and exit (about a second): until then the
    # runner lock is held, and the experiment reads ACTIVE (not running); never after.
    deadline = time.monotonic() + budget(30)
    listed = cli("experiment", "list", check=True).stdout
    while "PAUSED" not in listed and time.monotonic() < deadline:
        assert "ACTIVE (not running)" in listed, listed
        time.sleep(0.5)
        listed = cli("experiment", "list", check=True).stdout
    row = [line for line in listed.splitlines() if line.lstrip().startswith("1 ")]
    assert len(row) == 1 and "PAUSED" in row[0] and "ACTIVE" not in row[0], listed
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "PAUSED"
    activated = cli("experiment", "activate", "1")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])
