"""The failure protocol every launcher shares: how the first failure of a trial is reported.

A trial's workers fail together (the survivors are stopped), but only one failure caused the
others. Each launcher collects what its engine tells about its workers (torch's error files,
Horovod's failure records and exit codes), picks that first failure, and writes it once into
the trial's ``result.json`` with :func:`write_failure_result`, keeping whatever the chief had
reported there before.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import List

from determined_lite.launch._spec import WorkerResult

WORKER_MODULE = "determined_lite.launch.worker"


def worker_command(spec_path: str) -> List[str]:
    """The command line of one worker process."""
    return [sys.executable, "-u", "-m", WORKER_MODULE, spec_path]


def write_failure_result(result_path: str, error: str) -> None:
    """Mark the trial's result as failed by ``error``, keeping what the chief reported."""
    result = WorkerResult(status="error")
    if os.path.exists(result_path):
        with contextlib.suppress(OSError, ValueError, TypeError):
            result = WorkerResult.load(result_path)
    result.status = "error"
    result.error = error
    result.save(result_path)
