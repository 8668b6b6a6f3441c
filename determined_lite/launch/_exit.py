"""Ending a worker or agent process quickly once its work is done.

Python's own finalization of a process that loaded torch and joined a Gloo group takes seconds
(measured 1.5-2.5 s per trial on CPU, most of a short trial's tail): the launcher waits for it
before it sees the trial end. :func:`exit_now` does what finalization would do for the user —
non-daemon threads finish (as at a normal exit), ``atexit`` handlers run (logging, TensorBoard
writers, user hooks), output is flushed — and then ends the process without the teardown.

One kind of ``atexit`` work is skipped: torch's ``weakref.finalize`` of each operator library
(``torch.library._del_library``, ~170 of them once ``torch._dynamo`` is imported) deregisters
operators from this process's dispatcher, 0.1-0.35 s per worker (issue 27's profile of a trial's
end) for nothing any other process or file could see.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from typing import NoReturn

# The finalizers :func:`exit_now` does not run: (module, function) of their callback.
_PROCESS_LOCAL_FINALIZERS = {("torch.library", "_del_library")}


def exit_now(code: int) -> NoReturn:
    """End this process with ``code`` after threads, ``atexit`` handlers and output are done."""
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter runs at exit
    if shutdown is not None:
        shutdown()
    skip_process_local_finalizers()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def skip_process_local_finalizers() -> int:
    """Keep the exit from running the finalizers of :data:`_PROCESS_LOCAL_FINALIZERS` (their
    ``atexit`` flag cleared); how many. The user's finalizers and ``atexit`` handlers still run."""
    registry = getattr(weakref.finalize, "_registry", None)  # CPython's live finalizers
    if not isinstance(registry, dict):
        return 0
    skipped = 0
    for finalizer, info in list(registry.items()):
        func = getattr(info, "func", None)
        if (getattr(func, "__module__", None), getattr(func, "__name__", None)) in _PROCESS_LOCAL_FINALIZERS:
            finalizer.atexit = False
            skipped += 1
    return skipped
