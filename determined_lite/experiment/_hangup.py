"""A closed terminal during a foreground run (SIGHUP): the runner pauses the experiment, as
``det-lite experiment pause`` does, instead of dying with it (the default action), which left
the experiment ``ACTIVE (pause requested)`` with no process behind it.

With no terminal left, a write to it fails (EIO) and would end the runner before its trials
have stopped at a checkpoint: the runner's output goes on in the experiment's ``runner.log``,
where a ``--detach``-ed runner writes too.
"""

from __future__ import annotations

import os

from determined_lite.store._paths import open_private

RUNNER_LOG = "runner.log"


def detach_output(run_dir: str) -> None:
    """Point this process's stdout and stderr at ``<run_dir>/runner.log`` (appended, private)."""
    fd = open_private(os.path.join(run_dir, RUNNER_LOG))
    try:
        for target in (1, 2):
            os.dup2(fd, target)
    finally:
        os.close(fd)


def pausing_line(experiment_id: int, hangup: bool) -> str:
    """What the runner logs when a signal pauses it: SIGHUP (``hangup``), or Ctrl-C / SIGTERM."""
    if hangup:
        return (
            f"the terminal closed (SIGHUP): pausing experiment {experiment_id}; its trials stop at "
            f"a checkpoint, and det-lite experiment activate {experiment_id} resumes it"
        )
    return (
        f"pausing experiment {experiment_id}: its trials stop at a checkpoint at the next "
        "scheduling-unit boundary (Ctrl-C again to stop them now)"
    )
