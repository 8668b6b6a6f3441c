"""The failure protocol every launcher shares: how the first failure of a trial is reported.

A trial's workers fail together (the survivors are stopped), but only one failure caused the
others. Each is a ``runtime.WorkerFailure`` (read from the failure files of
``runtime/_failures.py`` or made from what an engine printed); :func:`primary_failure` picks the
one that caused the others, and :func:`write_failure_result` writes it once into the trial's
``result.json``, keeping whatever the chief had reported there before.

This module imports nothing heavier than the standard library: the launchers run without torch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from typing import Collection, List, Optional, Sequence, Tuple

from determined_lite.runtime._failures import WorkerFailure
from determined_lite.runtime._spec import WorkerResult, WorkerStatus

WORKER_MODULE = "determined_lite.launch.worker"

# Signals a trial's workers are stopped with on request (the launcher's SIGTERM, Ctrl-C).
STOP_SIGNALS = ("SIGTERM", "SIGINT")

# Seconds between SIGTERM and SIGKILL when a launcher stops the processes of a trial.
STOP_GRACE_S = 10.0


def worker_command(spec_path: str) -> List[str]:
    """The command line of one worker process."""
    return [sys.executable, "-u", "-m", WORKER_MODULE, spec_path]


def stopped_exit_code(signum: int) -> int:
    """The exit status of a launcher stopped by signal ``signum`` (a shell's ``128 + N``)."""
    return 128 + int(signum)


def signal_name(signum: int) -> Optional[str]:
    """``9`` → ``"SIGKILL"``; None for a number that names no signal."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def primary_failure(
    failures: Sequence[WorkerFailure], *, stop_signals: Collection[str], stopped_last: bool
) -> Optional[WorkerFailure]:
    """The failure that caused the others (None when there is none).

    In order: a recorded error (workers that fail only because a peer did record nothing); a
    death by a signal other than ``stop_signals`` (those the engine stops the survivors with);
    then any other end — with ``stopped_last``, exits with a code before the workers stopped
    by one of ``stop_signals``. Within each: earliest, then lowest rank.
    """
    if not failures:
        return None

    def key(f: WorkerFailure) -> Tuple[int, float, int]:
        if f.error:
            kind = 0
        elif f.signal and f.signal not in stop_signals:
            kind = 1
        elif f.signal and stopped_last:
            kind = 3
        else:
            kind = 2
        return kind, float(f.timestamp or 0), f.rank if isinstance(f.rank, int) else -1

    return min(failures, key=key)


# --- the trial's result ------------------------------------------------------------------------


def write_failure_result(result_path: str, error: str) -> None:
    """Mark the trial's result as failed by ``error``, keeping what the chief reported."""
    result = WorkerResult(status=WorkerStatus.ERROR)
    if os.path.exists(result_path):
        with contextlib.suppress(OSError, ValueError, TypeError):
            result = WorkerResult.load(result_path)
    result.status = WorkerStatus.ERROR
    result.error = error
    try:
        result.save(result_path)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # A full disk: the store's one-line error says so; a traceback here would only bury it.
