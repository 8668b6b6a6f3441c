"""The fork server's process: ``python -m determined_lite.launch._forkserver_serve FD PATH IDLE_S``.

It imports :data:`WARM_MODULES` once, then forks a fresh 1-slot worker for each request of any
runner connected to its socket (``FD``: the listening ``AF_UNIX`` ``SOCK_SEQPACKET`` socket bound
at ``PATH`` by the runner that started it, in a directory only the user can enter; a peer of
another uid is refused). It never runs trial code itself. Per connection: a ``ready`` message
(with the server's pid) once warm, then for each request the child's pid and, when it ends, its
exit status (``Popen.returncode`` style), or ``parked``: the child ran its trial to exit status 0
and waits, for up to :data:`PARK_S`, for that runner to name it in its next request (a request's
``reuse``: the pid of one of its parked children), which it then runs instead of a new fork
(``_reuse.py`` says when a child parks). It ends when it has had no connection and no child for
``IDLE_S`` seconds (0: as soon as the last one is gone), or when ``PATH`` no longer names its
socket; to end, it takes the socket's lock (``PATH.lock``, which a runner holds while it
connects or starts a server) so that no runner connects to a server that is going away.
"""

from __future__ import annotations

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

from determined_lite.launch import _reuse
from determined_lite.launch._hugepages import HugePages

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
PARK_S = 10.0  # how long a parked child waits for its runner's next trial
_IDLE_CHECK_S = 30.0  # how often an idle server looks whether its socket is still its own


# --- in the forked child ------------------------------------------------------------------------


def _child(request: Dict[str, Any], fds: List[int], control: socket.socket) -> None:
    """In the forked child: become a fresh worker and run the trial; while the runner allows it
    and the trial left nothing behind, park and run the next one it hands over. Never returns."""
    code = 1
    try:
        while True:
            _become_worker(request, fds, control.fileno())
            before = _reuse.before_trial() if request.get("reuse_key") else None
            code = _run_worker(request)
            after = _park(control, before, request, fds[1:]) if code == 0 and before is not None else None
            if after is None:
                break
            request, fds = after
    except BaseException:  # noqa: B036 -- whatever happens, the child ends here
        import traceback

        traceback.print_exc()
    from determined_lite.launch._exit import exit_now

    exit_now(code)


def _run_worker(request: Dict[str, Any]) -> int:
    from determined_lite.launch import worker

    sys.argv = [worker.__file__, request["argv"][-1]]  # as ``python -m`` sets it
    try:
        return worker.main(sys.argv[1:])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


def _park(
    control: socket.socket, before: Any, request: Dict[str, Any], passed: List[int]
) -> Optional[Tuple[Dict[str, Any], List[int]]]:
    """After a trial that ended well: unless it left something behind, let go of its output and
    descriptors (the runner sees its output end), tell the server, reset, and wait for the next
    request and its descriptors; None: end the process instead."""
    if _reuse.left_behind(before) is not None:
        return None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    for fd in [devnull, *passed]:
        os.close(fd)
    try:
        control.send(b'{"parked": true}')
        _reuse.reset(before, request["cwd"])
        data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, MAX_FDS)
    except OSError:
        return None
    return (json.loads(data), fds) if data else None


def _become_worker(request: Dict[str, Any], fds: List[int], control: int) -> None:
    if os.getsid(0) != os.getpid():
        os.setsid()  # its own session and process group (a parked child has them already)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out, passed = fds[0], fds[1:]
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = {0, 1, 2, control, *passed}  # the server's listener and other runners' connections are closed
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.umask(int(request["umask"]))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # ``python -m`` puts the working directory first
    _reseed()


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
    (``worker.log_info``), so that no worker pays for setting its level, and a reused worker's
    trial leaves the root as it found it (the server's own stderr is /dev/null)."""
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
        self.live: Set[int] = set()  # every child not reaped yet, running a trial or parked
        self.controls: Dict[int, socket.socket] = {}  # pid -> the server's end of its socket pair
        self.parked: Dict[int, Tuple[socket.socket, float]] = {}  # pid -> (its runner, since)
        self.idle_since = time.monotonic()
        self.huge = HugePages()  # asked for while no child shares the memory (_hugepages.py)
        self.forked = False  # since the last plan of huge pages

    def serve(self, wake: int) -> int:
        self.huge.plan()
        while True:
            watched: List[Any] = [self.listener, wake, *self.conns, *self.controls.values()]
            readable, _, _ = select.select(watched, [], [], self._timeout())
            if wake in readable:
                os.read(wake, 4096)
            if self.listener in readable:
                self._accept()
            for pid, control in list(self.controls.items()):
                if control in readable:
                    self._from_child(pid, control)
            for conn in [c for c in readable if c in self.conns]:
                self._request(conn)
            self._retire_parked()
            self._reap()
            if not self.live:
                self._huge_pages(busy=bool(readable))
            if self.conns or self.live:
                self.idle_since = time.monotonic()
            elif self._should_end() and self._end():
                return 0

    def _huge_pages(self, busy: bool) -> None:
        """With no child: ask for one piece when no message is waiting. After forks, plan again
        once no runner is connected either (the server's own writes split some of the pages its
        children shared; between two runs of a search, collapsing them again would cost more
        than the next forks save)."""
        if self.forked and not self.conns:
            self.forked = False
            self.huge.plan()
        if not busy:
            self.huge.step()

    def _timeout(self) -> Optional[float]:
        if self.huge.pending and not self.live:
            return 0.0
        if self.parked:
            return max(0.0, min(since for _, since in self.parked.values()) + PARK_S - time.monotonic())
        if self.conns or self.live:
            return None
        return max(0.0, min(_IDLE_CHECK_S, self.idle_since + self.idle_s - time.monotonic()))

    def _should_end(self) -> bool:
        return time.monotonic() - self.idle_since >= self.idle_s or _identity(self.path) != self.identity

    def _end(self) -> bool:
        """End (True) unless a runner is connecting: under the socket's lock, with no connection
        waiting, the socket's name is removed; the lock is released as the process exits."""
        try:
            lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock)
            return False
        if select.select([self.listener], [], [], 0)[0]:
            os.close(lock)  # a runner connected meanwhile
            return False
        if _identity(self.path) == self.identity:
            os.unlink(self.path)
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
        """Run one request on ``conn`` in the parked child it names, or in a new fork; a closed
        connection is dropped (its children run on, its parked ones end)."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data:
            self.conns.discard(conn)
            conn.close()
            for pid in [p for p, (owner, _) in self.parked.items() if owner is conn]:
                self._retire(pid)
            return
        request = json.loads(data)
        pid = self._hand_over(conn, int(request.get("reuse") or 0), data, fds) or self._fork(request, fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = (conn, int(request["rid"]))
        _send(conn, {"rid": request["rid"], "pid": pid})

    def _hand_over(self, conn: socket.socket, pid: int, data: bytes, fds: List[int]) -> int:
        """Send the request to the parked child ``pid`` of ``conn``: its pid, or 0 (fork one)."""
        owner = self.parked.pop(pid, None)
        if owner is None or owner[0] is not conn:
            if owner is not None:
                self.parked[pid] = owner
            return 0
        try:
            socket.send_fds(self.controls[pid], [data], fds)
        except OSError:
            self._retire(pid)
            return 0
        return pid

    def _fork(self, request: Dict[str, Any], fds: List[int]) -> int:
        control, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        gc.freeze()  # the child's collector never walks the server's objects
        self.forked = True
        pid = os.fork()
        if pid == 0:
            control.close()
            _child(request, fds, child_end)
        child_end.close()
        self.live.add(pid)
        self.controls[pid] = control
        return pid

    def _from_child(self, pid: int, control: socket.socket) -> None:
        """A child parked (its run ended with status 0: tell its runner) or closed its end."""
        try:
            data = control.recv(MAX_MESSAGE)
        except OSError:
            data = b""
        owner = self.children.pop(pid, None) if data else None
        if owner is None or owner[0] not in self.conns:
            self._retire(pid)  # gone, or its runner is: it ends
            return
        self.parked[pid] = (owner[0], time.monotonic())
        _send(owner[0], {"rid": owner[1], "code": 0, "parked": True})

    def _retire(self, pid: int) -> None:
        """Close ``pid``'s socket pair: a parked child ends (it is reaped as it exits)."""
        self.parked.pop(pid, None)
        control = self.controls.pop(pid, None)
        if control is not None:
            control.close()

    def _retire_parked(self) -> None:
        now = time.monotonic()
        for pid in [p for p, (_, since) in self.parked.items() if now - since >= PARK_S]:
            self._retire(pid)

    def _reap(self) -> None:
        while self.live:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.live.discard(pid)
            self._retire(pid)
            owner = self.children.pop(pid, None)
            if owner is not None and owner[0] in self.conns:
                _send(owner[0], {"rid": owner[1], "code": os.waitstatus_to_exitcode(status)})


def serve(fd: int, path: str, idle_s: float) -> int:
    """Warm up, then serve until idle for ``idle_s``; 1 when the warm-up failed (runners then
    start their trials plainly)."""
    listener = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = Server(listener, path, idle_s)
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 -- its runners start their trials plainly
        if _identity(path) == server.identity:
            os.unlink(path)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    return server.serve(wake_r)


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
