"""What wakes the runner's loop: a self-pipe written on each event, waited on with a bound.

A trial run's end (the executor's ``on_end``, called from the run's reader thread once its
process has exited) and Ctrl-C/SIGTERM (the runner's signal handler) write a byte; the loop
waits for one with ``select`` up to its fallback period (``_runner.POLL_S``), after which it
looks anyway: what no event announces (a pause, kill or trial kill the CLI or the SDK wrote to
the store, the progress files) is seen within that period. A byte written while the loop is
busy is read at its next wait, so no event is lost between two waits.

Other processes on this machine wake it through a FIFO (:meth:`Wakeup.listen`, in the
experiment's private run directory): a chief that asks "what next?" writes a byte there once its
question is written (``runtime/_next_op.py``), so the loop answers at once instead of polling.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from typing import List, Optional


class Wakeup:
    """The loop's self-pipe (see the module's docstring); :meth:`close` it once the loop is over."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()  # no write once closed (its descriptor could be reused)
        self._closed = False
        self._fifo: Optional[str] = None
        self._fifo_fds: List[int] = []  # its read end, then a write end held (no EOF when a writer closes)

    def listen(self, path: str) -> bool:
        """Wake also on a byte another process writes to the FIFO made now at ``path`` (0600,
        replacing what an earlier runner left there); False where no FIFO can be made there
        (a file system without them): then the loop polls for what it would announce."""
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.mkfifo(path, 0o600)
            reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        self._fifo = path
        self._fifo_fds = [reader, os.open(path, os.O_WRONLY | os.O_NONBLOCK)]
        return True

    @property
    def listening(self) -> bool:
        return bool(self._fifo_fds)

    def wake(self) -> None:
        """From any thread: the loop's next (or current) wait returns now."""
        with self._lock:
            if not self._closed:
                self._write_byte()

    def wake_from_signal(self) -> None:
        """From the loop's own signal handler (no lock: a handler can interrupt a handler; the
        runner closes this only after its handlers are restored)."""
        if not self._closed:
            self._write_byte()

    def _write_byte(self) -> None:
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:  # the pipe is full: a wake-up is pending already
            pass

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a wake-up; whether one came (all pending are taken)."""
        readable, _, _ = select.select([self._read, *self._fifo_fds[:1]], [], [], timeout)
        for fd in readable:
            try:
                while os.read(fd, 4096):
                    pass
            except BlockingIOError:
                pass
        return bool(readable)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._read, self._write, *self._fifo_fds):
                os.close(fd)
            if self._fifo is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._fifo)
