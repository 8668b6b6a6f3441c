"""A fork server for 1-slot workers: trials start from a process that imported torch already.

A fresh worker spends ~3.5 s of its start-up importing torch, ``torch._dynamo`` (imported by
the first ``torch.optim`` optimizer) and det-lite's harness, and ~0.05 s on everything else
(``benchmarks/README.md``, "Trial start-up"). 1-slot workers are therefore ``fork()``-ed from a
server process (``launch/_forkserver_serve.py``) that imported those modules once and never runs
trial code. The child is a full fresh worker: its own session and process group (``stop()`` and
the kill/pause paths signal the group), the trial's environment, working directory and umask,
stdout/stderr on the trial's output pipe, the runner lock's file descriptor, and nothing else of
the server's (its other descriptors are closed, its random generators reseeded). Each child
starts from the server's untouched image; a child whose trial ended well and left nothing
behind may then run later trials of the same experiment for the same runner
(``launch/_reuse.py``; ``DET_LITE_REUSE_WORKERS=0`` turns that off).

One server serves every runner of the user whose workers would import the same thing: its
**key** is the Python, det-lite's and torch's files (paths, sizes, modification times) and the
workers' environment but for :data:`NOT_KEYED` (variables that differ between runs and that
nothing reads at import time). A runner connects to the key's socket
(``<runtime dir>/det-lite-<uid>/fs-<key>.sock``, a directory only the user can enter) or, when
no server answers there, starts one; a search's second command, or a second search, finds its
server warm. A server ends once it has served no runner for ``$DET_LITE_FORKSERVER_IDLE_S``
(default :data:`DEFAULT_IDLE_S`; 0: when its last runner is gone).

Transport: one ``AF_UNIX`` ``SOCK_SEQPACKET`` connection per runner, one JSON message per trial
with the output pipe's and the runner lock's descriptors (``SCM_RIGHTS``); the server answers
with the child's pid, and with its exit status (``Popen.returncode`` style) when it ends.

``DET_LITE_FORKSERVER=0`` turns it off. When the server cannot start, is not ready within
:data:`READY_TIMEOUT_S` or dies, a trial starts as a plain process; a trial running when the
server dies is waited for until its process is gone, and its ``result.json`` says how it ended.

:meth:`ForkServer.spawn` never waits for the server's warm-up: a trial asked for before the
server is ready gets its :class:`ForkedChild` at once (``pid`` 0, running) and is forked, or
started plainly, by a thread once the server is ready (or is not within the timeout); a stop
before then means it never starts. The runner's loop goes on meanwhile (logs, progress, pause,
kill, the next trials' specs).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import determined_lite
from determined_lite._timeouts import FORKSERVER_IDLE_ENV, env_seconds
from determined_lite.launch._forkserver_serve import MAX_MESSAGE
from determined_lite.runtime._cluster import SPEC_ENV

FORKSERVER_ENV = "DET_LITE_FORKSERVER"
REUSE_ENV = "DET_LITE_REUSE_WORKERS"
MAX_PARKED = 8  # parked processes a runner remembers per key (the server ends the others)
# Variables that differ between the runs one server serves, read by nothing at import time.
NOT_KEYED = frozenset(
    {SPEC_ENV, REUSE_ENV, "DET_LITE_SUPERVISOR_PID", "DET_LITE_SUPERVISOR_HOST", "DET_LITE_HOME"}
    | {"PWD", "OLDPWD", "SHLVL", "_"}  # the shell's
    | {"PYTEST_CURRENT_TEST"}  # pytest's name of the running test: a suite's tests share one
)
READY_TIMEOUT_S = 120.0
DEFAULT_IDLE_S = 600.0
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


def _flag(env: Dict[str, str], name: str) -> bool:
    """On unless ``env`` (or this process's environment) sets ``name`` to 0, false or no."""
    return env.get(name, os.environ.get(name, "1")).strip() not in ("0", "false", "no")


def enabled(env: Dict[str, str]) -> bool:
    """Whether 1-slot workers may be forked (``DET_LITE_FORKSERVER=0`` says no)."""
    return _flag(env, FORKSERVER_ENV)


def reuse_enabled(env: Dict[str, str]) -> bool:
    """Whether a run may use a process parked by an earlier run of its experiment
    (``DET_LITE_REUSE_WORKERS=0`` says no: every run is a fresh fork)."""
    return _flag(env, REUSE_ENV)


# Starts the worker as a plain process, its stdout and stderr on the given descriptor (the
# fallback when the server cannot fork it).
PlainStart = Callable[[int], "subprocess.Popen[bytes]"]
WAIT_STEP_S = 0.05  # how often a trial waiting for the warm-up looks whether it was stopped


def _server_env(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k not in NOT_KEYED}


def _files_stamp() -> List[Tuple[str, int, int]]:
    """Path, size and modification time of each of det-lite's Python files and torch's
    ``__init__.py``: an edited checkout or another torch means another server."""
    stamps: List[Tuple[str, int, int]] = []
    for dirpath, _, names in os.walk(os.path.dirname(os.path.abspath(determined_lite.__file__))):
        stamps.extend(_stamp(os.path.join(dirpath, n)) for n in names if n.endswith(".py"))
    torch_spec = importlib.util.find_spec("torch")  # finds it without importing it
    if torch_spec is not None and torch_spec.origin:
        stamps.append(_stamp(torch_spec.origin))
    return sorted(stamps)


def _stamp(path: str) -> Tuple[str, int, int]:
    st = os.stat(path)
    return path, st.st_size, st.st_mtime_ns


def server_key(env: Dict[str, str]) -> str:
    """What a server's image depends on, hashed (see the module's docstring)."""
    parts = [sys.executable, sys.version, sorted(_server_env(env).items()), _files_stamp()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _private_dir(path: str) -> bool:
    """Make ``path`` (mode 0700) or check that it is this user's own directory that nobody else
    can enter (a symlink or anyone else's directory is refused)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def runtime_dir() -> Tuple[str, bool]:
    """Where this user's servers' sockets are, and whether other runners find them there:
    ``$XDG_RUNTIME_DIR`` or the temporary directory, ``det-lite-<uid>``; else a new private
    temporary directory (its server serves this runner alone)."""
    for base in (os.environ.get("XDG_RUNTIME_DIR", ""), tempfile.gettempdir(), "/tmp"):
        path = os.path.join(base, f"det-lite-{os.getuid()}")
        if base and len(path) + 32 <= _MAX_SOCKET_PATH and _private_dir(path):
            return path, True
    return tempfile.mkdtemp(prefix="det-lite-"), False


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- the runner's side --------------------------------------------------------------------------


class ForkedChild:
    """A worker started through the server, as much of ``subprocess.Popen`` as ``TrialProcess``
    uses: forked, or a plain process when the server could not fork it; ``pid`` is 0 until then."""

    def __init__(self, server: "ForkServer", rid: int, out: IO[str], reuse_key: str = "") -> None:
        self._server = server
        self.rid = rid
        self.reuse_key = reuse_key  # its process may run a later run of the same key
        self.parked = False  # its run ended and its process waits for another (not this run's)
        self.signalled = False  # a stop reached its process: never reused
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
        """Signal the worker's process group; before it started, make sure it never does. Once
        its run ended and the process parked, the process is no longer this run's: nothing."""
        with self._state:
            pid = self.pid
            if not pid:
                self.cancelled = True
                return
            if self.parked:
                return
            self.signalled = True
            _killpg(pid, sig)  # under the lock: the process is not parked meanwhile

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
    """The runner's connection to the server for its workers' key: the one running already, or
    one it starts (see the module's docstring)."""

    def __init__(self, env: Dict[str, str]) -> None:
        self.env = _server_env(env)
        self.key = server_key(env)
        self.lost = False
        self.pid = 0  # the server's, once it said it is ready
        self._proc: Optional["subprocess.Popen[bytes]"] = None  # when this runner started it
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._children: Dict[int, ForkedChild] = {}
        self._parked: Dict[str, List[int]] = {}  # reuse key -> processes parked for it, oldest first
        self._next = 0
        self._sock = self._connect(env)
        threading.Thread(target=self._receive, name="det-lite-forkserver", daemon=True).start()

    def _connect(self, env: Dict[str, str]) -> socket.socket:
        """Connect to the key's server, or start one and connect to it, under the socket's lock
        (a server ends only under it: it never goes away between the two)."""
        directory, shared = runtime_dir()
        path = os.path.join(directory, f"fs-{self.key}.sock")
        idle_s = env_seconds(FORKSERVER_IDLE_ENV, DEFAULT_IDLE_S, env) if shared else 0.0
        with _locked(path + ".lock"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                pass  # none, or a dead one's name
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self._start_server(path, directory, idle_s)
            sock.connect(path)
            return sock

    def _start_server(self, path: str, directory: str, idle_s: float) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(path)
            listener.listen(64)
            self._proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "determined_lite.launch._forkserver_serve"]
                + [str(listener.fileno()), path, repr(idle_s)],
                env=self.env,
                cwd=directory,  # no project directory first on its sys.path
                pass_fds=(listener.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # import-time warnings are not any trial's
                start_new_session=True,  # a Ctrl-C meant for the runner's trials is not for it
            )
        finally:
            listener.close()
        threading.Thread(target=self._proc.wait, name="det-lite-forkserver-reaper", daemon=True).start()

    def _receive(self) -> None:
        try:
            while True:
                data = self._sock.recv(MAX_MESSAGE)
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
            self.pid = int(message.get("pid", 0))
            self._ready.set()
            return
        child = self._children.get(int(message["rid"]))
        if child is None:
            return
        if "pid" in message:
            child._started_as(int(message["pid"]), plain=False)
        if "code" in message:
            self._children.pop(child.rid, None)
            if message.get("parked"):
                self._park(child)
            child._set_exit(int(message["code"]))

    def _park(self, child: ForkedChild) -> None:
        """``child``'s run ended and its process waits: a later run of its key may use it,
        unless a stop signalled it (then it is left to the server's timeout)."""
        with child._state:
            child.parked = not child.signalled
        if child.parked and child.reuse_key:
            with self._lock:
                pids = self._parked.setdefault(child.reuse_key, [])
                pids.append(child.pid)
                del pids[:-MAX_PARKED]

    def _take_parked(self, reuse_key: str) -> int:
        """The pid of the process that parked last for ``reuse_key`` (0: none)."""
        with self._lock:
            pids = self._parked.get(reuse_key)
            return pids.pop() if pids else 0

    def usable(self, env: Dict[str, str]) -> bool:
        return not self.lost and _server_env(env) == self.env

    def spawn(
        self,
        argv: Sequence[str],
        env: Dict[str, str],
        cwd: str,
        pass_fds: Sequence[int],
        plain: PlainStart,
        reuse_key: str = "",
    ) -> Optional[ForkedChild]:
        """A worker running ``argv``'s spec: in a process parked by an earlier run of
        ``reuse_key`` (non-empty: runs of one experiment, ``_reuse.py``), or forked now when the
        server is ready, else by a thread once it is (``plain`` starts it when the server
        cannot); None when the server is lost already (the caller starts it plainly)."""
        if self.lost:
            return None
        read_end, write_end = os.pipe()
        out = os.fdopen(read_end, "r", buffering=1, errors="replace")
        with self._lock:
            self._next += 1
            child = ForkedChild(self, self._next, out, reuse_key)
            self._children[child.rid] = child
        umask = os.umask(0o077)
        os.umask(umask)
        request = {"rid": child.rid, "argv": list(argv), "env": env, "cwd": cwd, "umask": umask}
        if reuse_key and reuse_enabled(env):
            request.update(reuse_key=reuse_key, reuse=self._take_parked(reuse_key))
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
        """Leave the server (it ends once idle: ``$DET_LITE_FORKSERVER_IDLE_S``)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


_server: Optional[ForkServer] = None
_server_lock = threading.Lock()


def spawn(
    argv: Sequence[str],
    env: Dict[str, str],
    cwd: str,
    pass_fds: Sequence[int],
    plain: PlainStart,
    reuse_key: str = "",
) -> Optional[ForkedChild]:
    """A 1-slot worker for ``argv`` (``python -u -m determined_lite.launch.worker SPEC``) through
    the server (a parked process of ``reuse_key``, a fork, or by ``plain`` when it cannot), or
    None: the caller starts it plainly."""
    server = start(env)
    return None if server is None else server.spawn(argv, env, cwd, pass_fds, plain, reuse_key)


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
