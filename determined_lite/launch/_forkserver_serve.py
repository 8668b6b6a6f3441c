"""The fork server's process: ``python -m determined_lite.launch._forkserver_serve FD PATH IDLE_S``.

It imports :data:`WARM_MODULES` once, then forks a fresh 1-slot worker for each request of any
runner connected to its socket (``FD``: the listening ``AF_UNIX`` ``SOCK_SEQPACKET`` socket bound
at ``PATH`` by the runner that started it, in a directory only the user can enter; a peer of
another uid is refused). It never runs trial code itself, and each child runs one trial and
exits: no process runs two trials. Per connection: a ``ready`` message (with the server's pid)
once warm, then for each request the child's pid and, when it ends, its exit status
(``Popen.returncode`` style). It ends when it has had no connection and no child for ``IDLE_S``
seconds (0: as soon as the last one is gone), when ``PATH`` no longer names its socket, or on
SIGTERM (``det-lite server stop``; the children it forked run on); to end, it takes the socket's
lock (``PATH.lock``, which a runner holds while it connects or starts a server) so that no
runner connects to a server that is going away, and removes ``PATH`` and its info file.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from determined_lite.launch._server_registry import info_path

# What the server imports before it forks (the lazy ``torch._dynamo`` import of the first
# optimizer alone is ~1.5 s).
WARM_MODULES = (
    "torch",
    "torch._dynamo",
    "torch.utils.serialization",
    "determined_lite.launch.worker",
    "determined_lite.pytorch",
    "determined_lite.distributed",
    # What every trial imported on its first use (~40 ms of CPU per worker, ~30 ms once here):
    "determined_lite.config._launcher",
    "determined_lite.pytorch._store_callback",
    "determined_lite.tensorboard.metric_writers.pytorch",
)
MAX_MESSAGE = 1 << 20
MAX_FDS = 16
_IDLE_CHECK_S = 30.0  # how often an idle server looks whether its socket is still its own


# --- in the forked child ------------------------------------------------------------------------


def _child(request: Dict[str, Any], fds: List[int]) -> None:
    """In the forked child: become a fresh worker, run its one trial, exit. Never returns."""
    code = 1
    try:
        _become_worker(request, fds)
        from determined_lite.launch import worker

        sys.argv = [worker.__file__, request["argv"][-1]]  # as ``python -m`` sets it
        code = worker.main(sys.argv[1:])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: B036 -- whatever happens, the child ends here
        import traceback

        traceback.print_exc()
    from determined_lite.launch._exit import exit_now

    exit_now(code)


def _become_worker(request: Dict[str, Any], fds: List[int]) -> None:
    os.setsid()  # its own session and process group
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out, passed = fds[0], fds[1:]
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    passed = _renumber(passed, [int(fd) for fd in request.get("fds") or ()])
    _close_all_but({0, 1, 2, *passed})  # the server's listener and other runners' connections
    os.umask(int(request["umask"]))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # ``python -m`` puts the working directory first
    _reseed()


def _renumber(passed: List[int], numbers: List[int]) -> List[int]:
    """The passed descriptors at the numbers the runner had them at (a Ray slot's worker finds
    its report pipes by the numbers in its environment); as they came when none are given."""
    if not numbers or len(numbers) != len(passed) or any(n <= 2 for n in numbers):
        return passed
    floor = max([*numbers, *passed]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in passed]  # out of the targets' way
    for fd in passed:
        os.close(fd)
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number)
        os.close(fd)
    return numbers


def _close_all_but(keep: Set[int]) -> None:
    """Close every descriptor but ``keep`` (``close_range`` where the kernel has it)."""
    low = 0
    for fd in sorted(keep) + [os.sysconf("SC_OPEN_MAX")]:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1


def _reseed() -> None:
    """Fresh random states, as a new interpreter has (det-lite seeds the trial's own later)."""
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    import torch

    # The CPU generator from the system's entropy, as a new interpreter's (``torch.seed()``
    # also queues every device's, ~4 ms; a forked worker never uses CUDA).
    torch.default_generator.seed()
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


# --- the server ---------------------------------------------------------------------------------


def _warm_up() -> None:
    """Import :data:`WARM_MODULES`, then move every object into the collector's permanent
    generation, where a forked child's collections never walk them. Otherwise its first
    collection walks the ~290,000 objects of torch's import and writes into each one's header,
    copying the heap's pages from the server (a middle-generation collection 3.4 ms, a full one
    210 ms here; 0.8 ms frozen). The root logger logs INFO to stderr as every worker's does
    (``worker.log_info``), so that no worker pays for setting its level (the server's own stderr
    is /dev/null)."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    from determined_lite.launch import worker

    worker.log_info()
    gc.collect()
    gc.freeze()


def _identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _send(conn: socket.socket, message: Dict[str, Any]) -> None:
    try:
        conn.send(json.dumps(message).encode())
    except OSError:
        pass  # that runner is gone; its children run on and are reaped here


class Server:
    """The loop's state: the listener, the runners' connections, the children and whose they are."""

    def __init__(self, listener: socket.socket, path: str, idle_s: float) -> None:
        self.listener, self.path, self.idle_s = listener, path, idle_s
        self.identity = _identity(path)
        self.conns: Set[socket.socket] = set()
        self.children: Dict[int, Tuple[socket.socket, int]] = {}  # pid -> (connection, request id)
        self.idle_since = time.monotonic()
        self.stopping = False  # SIGTERM: end now

    def serve(self, wake: int) -> int:
        while True:
            watched: List[Any] = [self.listener, wake, *self.conns]
            readable, _, _ = select.select(watched, [], [], self._timeout())
            if self.conns or self.children:  # busy until now: idle from here at the earliest
                self.idle_since = time.monotonic()
            if wake in readable:
                os.read(wake, 4096)
            if self.stopping:
                self.end(wait=True)
                return 0
            if self.listener in readable:
                self._accept()
            for conn in [c for c in readable if c in self.conns]:
                self._request(conn)
            self._reap()
            if self.conns or self.children:
                self.idle_since = time.monotonic()
            elif self._should_end() and self.end():
                return 0

    def _timeout(self) -> Optional[float]:
        if self.conns or self.children:
            return None
        return max(0.0, min(_IDLE_CHECK_S, self.idle_since + self.idle_s - time.monotonic()))

    def _should_end(self) -> bool:
        return time.monotonic() - self.idle_since >= self.idle_s or _identity(self.path) != self.identity

    def end(self, wait: bool = False) -> bool:
        """End (True) unless a runner is connecting (``wait``: end anyway, once no runner holds
        the lock): under the socket's lock, with no connection waiting, the socket's name and
        its info file are removed; the lock is released as the process exits."""
        try:
            lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock)
            return False
        if not wait and select.select([self.listener], [], [], 0)[0]:
            os.close(lock)  # a runner connected meanwhile
            return False
        if _identity(self.path) == self.identity:
            os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.unlink(info_path(self.path))
        return True

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if _peer_uid(conn) != os.getuid():
            conn.close()
            return
        self.conns.add(conn)
        _send(conn, {"ready": True, "pid": os.getpid()})

    def _request(self, conn: socket.socket) -> None:
        """Fork the child of one request on ``conn``; a closed connection is dropped (its
        children run on)."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data:
            self.conns.discard(conn)
            conn.close()
            return
        request = json.loads(data)
        gc.freeze()  # the child's collector never walks the server's objects
        pid = os.fork()
        if pid == 0:
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = (conn, int(request["rid"]))
        _send(conn, {"rid": request["rid"], "pid": pid})

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            owner = self.children.pop(pid, None)
            if owner is not None and owner[0] in self.conns:
                _send(owner[0], {"rid": owner[1], "code": os.waitstatus_to_exitcode(status)})


class _Stopped(BaseException):
    """SIGTERM during the warm-up: end at once."""


def _stop_during_warm_up(*_: Any) -> None:
    raise _Stopped


def serve(fd: int, path: str, idle_s: float) -> int:
    """Warm up, then serve until idle for ``idle_s``; 1 when the warm-up failed (runners then
    start their trials plainly)."""
    listener = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = Server(listener, path, idle_s)
    signal.signal(signal.SIGTERM, _stop_during_warm_up)
    try:
        _warm_up()
        signal.signal(signal.SIGTERM, lambda *_: setattr(server, "stopping", True))
    except _Stopped:
        server.end(wait=True)
        return 0
    except Exception:  # noqa: BLE001 -- its runners start their trials plainly
        server.end(wait=True)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    return server.serve(wake_r)


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
