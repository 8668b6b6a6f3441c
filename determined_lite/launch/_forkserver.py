"""A fork server for 1-slot workers: trials start from a process that imported torch already.

A fresh worker spends ~3.5 s of its start-up importing torch, ``torch._dynamo`` (imported by
the first ``torch.optim`` optimizer) and det-lite's harness, and ~0.05 s on everything else
(``benchmarks/README.md``, "Trial start-up"). The runner therefore starts, once, a server
process (``python -m determined_lite.launch._forkserver``) that imports those modules and
never runs any trial code; each 1-slot worker is then ``fork()``-ed from it. The child is a
full fresh worker: its own session and process group (``stop()`` and the kill/pause paths
signal the group), the trial's environment, working directory and umask, stdout/stderr on
the trial's output pipe, the runner lock's file descriptor, and nothing else of the server's
(its other descriptors are closed, its random generators reseeded). A trial cannot leak into
the next one: each child starts from the server's untouched image.

Transport: one ``AF_UNIX`` ``SOCK_SEQPACKET`` socket pair between the runner and the server
(no file, no port; only the two processes hold its ends). The runner sends one JSON message per
trial with the pipe's and the lock's descriptors (``SCM_RIGHTS``); the server answers with the
child's pid, and with its exit status (``Popen.returncode`` style) when it ends.

The server is used only when the trial's environment is the one it was started with (but for
the per-trial :data:`PER_TRIAL_ENV`): what torch reads at import time is then what a fresh
worker would read. ``DET_LITE_FORKSERVER=0`` turns it off. When the server cannot start, is not
ready within :data:`READY_TIMEOUT_S` or dies, a trial starts as a plain process; a trial
running when the server dies is waited for until its process is gone, and its
``result.json`` says how it ended.

:meth:`ForkServer.spawn` never waits for the server's warm-up: a trial asked for before the
server is ready gets its :class:`ForkedChild` at once (``pid`` 0, running) and is forked, or
started plainly, by a thread once the server is ready (or is not within the timeout); a stop
before then means it never starts. The runner's loop goes on meanwhile (logs, progress, pause,
kill, the next trials' specs).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Dict, List, Optional, Sequence

from determined_lite.runtime._cluster import SPEC_ENV

FORKSERVER_ENV = "DET_LITE_FORKSERVER"
# Environment variables that differ between the trials of one server.
PER_TRIAL_ENV = (SPEC_ENV,)
READY_TIMEOUT_S = 120.0
_MAX_MESSAGE = 1 << 20
_MAX_FDS = 16
# What the server imports before it forks (the lazy ``torch._dynamo`` import of the first
# optimizer alone is ~1.5 s).
WARM_MODULES = (
    "torch",
    "torch._dynamo",
    "determined_lite.launch.worker",
    "determined_lite.pytorch",
    "determined_lite.distributed",
)


def enabled(env: Dict[str, str]) -> bool:
    """Whether 1-slot workers may be forked (``DET_LITE_FORKSERVER=0`` says no)."""
    return env.get(FORKSERVER_ENV, os.environ.get(FORKSERVER_ENV, "1")).strip() not in ("0", "false", "no")


# Starts the worker as a plain process, its stdout and stderr on the given descriptor (the
# fallback when the server cannot fork it).
PlainStart = Callable[[int], "subprocess.Popen[bytes]"]
WAIT_STEP_S = 0.05  # how often a trial waiting for the warm-up looks whether it was stopped


def _server_env(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_TRIAL_ENV}


# --- the runner's side --------------------------------------------------------------------------


class ForkedChild:
    """A worker started through the server, as much of ``subprocess.Popen`` as ``TrialProcess``
    uses: forked, or a plain process when the server could not fork it; ``pid`` is 0 until then."""

    def __init__(self, server: "ForkServer", rid: int, out: IO[str]) -> None:
        self._server = server
        self.rid = rid
        self.stdout = out
        self.pid = 0
        self.plain = False  # started as a plain process (the server could not)
        self.returncode: Optional[int] = None
        self._started = threading.Event()
        self._ended = threading.Event()
        self._state = threading.Lock()
        self.cancelled = False  # stopped before it started: it never starts

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def _started_as(self, pid: int, plain: bool) -> None:
        """The process is running; killed at once when a stop came before it started."""
        with self._state:
            self.pid, self.plain = pid, plain
            cancelled = self.cancelled
        if cancelled:
            _killpg(pid, signal.SIGKILL)
        self._started.set()

    def kill_group(self, sig: int) -> None:
        """Signal the worker's process group; before it started, make sure it never does."""
        with self._state:
            pid = self.pid
            if not pid:
                self.cancelled = True
                return
        _killpg(pid, sig)

    def poll(self) -> Optional[int]:
        if not self._ended.is_set() and self._server.lost and self.pid and not self.plain:
            self._orphan_check()
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(["forked worker"], timeout or 0.0)
            self._ended.wait(left)
        assert self.returncode is not None
        return self.returncode

    def _orphan_check(self) -> None:
        """The server died: the child's status is lost; once its process is gone, exit 0 and let
        its ``result.json`` (or its absence) say how it ended."""
        if not _alive(self.pid):
            self._set_exit(0)


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class ForkServer:
    """The runner's handle on one server process (started by :func:`spawn` when needed)."""

    def __init__(self, env: Dict[str, str]) -> None:
        self.env = _server_env(env)
        self.lost = False
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._children: Dict[int, ForkedChild] = {}
        self._next = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-u", "-m", __name__, str(theirs.fileno())],
                env=self.env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # import-time warnings are not any trial's
                start_new_session=True,  # a Ctrl-C meant for the runner's trials is not for it
            )
        finally:
            theirs.close()
        threading.Thread(target=self._receive, name="det-lite-forkserver", daemon=True).start()

    def _receive(self) -> None:
        try:
            while True:
                data = self._sock.recv(_MAX_MESSAGE)
                if not data:
                    break
                self._dispatch(json.loads(data))
        except (OSError, ValueError):
            pass
        self.lost = True
        self._ready.set()
        for child in list(self._children.values()):
            child._started.set()

    def _dispatch(self, message: Dict[str, Any]) -> None:
        if message.get("ready"):
            self._ready.set()
            return
        child = self._children.get(int(message["rid"]))
        if child is None:
            return
        if "pid" in message:
            child._started_as(int(message["pid"]), plain=False)
        if "code" in message:
            self._children.pop(child.rid, None)
            child._set_exit(int(message["code"]))

    def usable(self, env: Dict[str, str]) -> bool:
        return not self.lost and self._proc.poll() is None and _server_env(env) == self.env

    def spawn(
        self, argv: Sequence[str], env: Dict[str, str], cwd: str, pass_fds: Sequence[int], plain: PlainStart
    ) -> Optional[ForkedChild]:
        """A worker running ``argv``'s spec: forked now when the server is ready, else by a
        thread once it is (``plain`` starts it when the server cannot); None when the server is
        lost already (the caller starts it plainly)."""
        if self.lost:
            return None
        read_end, write_end = os.pipe()
        out = os.fdopen(read_end, "r", buffering=1, errors="replace")
        with self._lock:
            self._next += 1
            child = ForkedChild(self, self._next, out)
            self._children[child.rid] = child
        umask = os.umask(0o077)
        os.umask(umask)
        request = {"rid": child.rid, "argv": list(argv), "env": env, "cwd": cwd, "umask": umask}
        start = (child, request, write_end, tuple(pass_fds), plain)
        if self._ready.is_set():
            self._start(*start)
        else:  # warming up: the runner goes on, the child starts once the server is ready
            threading.Thread(target=self._start, args=start, name="det-lite-fork-wait", daemon=True).start()
        return child

    def _start(
        self, child: ForkedChild, request: Dict[str, Any], out: int, fds: Sequence[int], plain: PlainStart
    ) -> None:
        """Fork ``child`` (or start it plainly when the server cannot); ``out`` is closed here."""
        try:
            if self._await_ready(child):
                try:
                    with self._lock:
                        socket.send_fds(self._sock, [json.dumps(request).encode()], [out, *fds])
                except OSError:
                    self.lost = True
                child._started.wait(READY_TIMEOUT_S)
            if child.pid:
                return
            self._children.pop(child.rid, None)
            if child.cancelled:
                child._set_exit(-signal.SIGKILL)
                return
            popen = plain(out)
            child._started_as(popen.pid, plain=True)
            threading.Thread(target=lambda: child._set_exit(popen.wait()), daemon=True).start()
        finally:
            os.close(out)

    def _await_ready(self, child: ForkedChild) -> bool:
        """Wait for the warm-up (up to :data:`READY_TIMEOUT_S`) unless ``child`` is stopped
        meanwhile; whether the server can fork it."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not child.cancelled and not self._ready.wait(WAIT_STEP_S):
            if time.monotonic() > deadline:
                return False
        return self._ready.is_set() and not self.lost and not child.cancelled

    def close(self) -> None:
        self._sock.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()


_server: Optional[ForkServer] = None
_server_lock = threading.Lock()


def spawn(
    argv: Sequence[str], env: Dict[str, str], cwd: str, pass_fds: Sequence[int], plain: PlainStart
) -> Optional[ForkedChild]:
    """A 1-slot worker for ``argv`` (``python -u -m determined_lite.launch.worker SPEC``) through
    the server (forked, or by ``plain`` when it cannot), or None: the caller starts it plainly."""
    server = start(env)
    return None if server is None else server.spawn(argv, env, cwd, pass_fds, plain)


def start(env: Dict[str, str]) -> Optional[ForkServer]:
    """The server for workers run with ``env``, started now (its warm-up runs in the
    background) unless one for ``env`` runs already; None when it is off or cannot start."""
    global _server
    if not enabled(env):
        return None
    with _server_lock:
        if _server is None or not _server.usable(env):
            if _server is not None:
                _server.close()
            try:
                _server = ForkServer(env)
            except OSError:
                _server = None
        return _server


@atexit.register
def _close_server() -> None:
    if _server is not None:
        _server.close()


# --- the server process -------------------------------------------------------------------------


def _child(request: Dict[str, Any], fds: List[int]) -> None:
    """In the forked child: become a fresh worker, run it, never return."""
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
    keep = {0, 1, 2, *passed}
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

    torch.seed()
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _warm_up() -> None:
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)


def serve(fd: int) -> int:
    """The server's loop: fork a worker per request, report its pid and exit status."""
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 -- the runner starts its trials plainly
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    sock.send(json.dumps({"ready": True}).encode())
    children: Dict[int, int] = {}
    while True:
        readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        if sock.fileno() in readable and not _accept(sock, children):
            return 0
        _reap(sock, children)


def _accept(sock: socket.socket, children: Dict[int, int]) -> bool:
    """Fork the child of one request; False when the runner is gone."""
    try:
        data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, _MAX_FDS)
    except OSError:
        return False
    if not data:
        return False
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    children[pid] = int(request["rid"])
    sock.send(json.dumps({"rid": request["rid"], "pid": pid}).encode())
    return True


def _reap(sock: socket.socket, children: Dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = children.pop(pid, None)
        if rid is not None:
            code = os.waitstatus_to_exitcode(status)
            try:
                sock.send(json.dumps({"rid": rid, "code": code}).encode())
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
