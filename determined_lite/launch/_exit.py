"""Ending a worker or agent process quickly once its work is done.

Python's own finalization of a process that loaded torch and joined a Gloo group takes seconds
(measured 1.5-2.5 s per trial on CPU, most of a short trial's tail): the launcher waits for it
before it sees the trial end. :func:`exit_now` does what finalization would do for the user —
non-daemon threads finish (as at a normal exit), ``atexit`` handlers run (logging, TensorBoard
writers, user hooks), output is flushed — and then ends the process without the teardown.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """End this process with ``code`` after threads, ``atexit`` handlers and output are done."""
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter runs at exit
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
