"""The runner's side of the fork server of 1-slot workers: trials start from a process that
imported torch already (~3.5 s of a fresh worker's start), each from its own fork of the
server's untouched image (``launch/_forkserver_serve.py``, which never runs trial code).

At most one server runs per user and installation (its key: the installation alone); a trial
whose environment differs from the server's in more than :func:`image_env` allows, or that no
server takes (none started, not ready within :data:`READY_TIMEOUT_S`, died), starts as a plain
process. :meth:`ForkServer.spawn` never waits for the warm-up. ``DET_LITE_FORKSERVER=0`` turns
it off. The contract (transport, socket, info file, idle end): docs/design.md, "Warm worker
start".
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Dict, Iterator, Optional, Sequence

import psutil

from determined_lite._timeouts import FORKSERVER_IDLE_ENV, env_seconds
from determined_lite.launch._forkserver_serve import MAX_MESSAGE
from determined_lite.launch._server_registry import (
    DEFAULT_IDLE_S,
    info_path,
    read_info,
    runtime_dir,
    server_key,
    write_info,
)
from determined_lite.runtime._cluster import SPEC_ENV

FORKSERVER_ENV = "DET_LITE_FORKSERVER"
# A trial is forked only when its whole environment equals the server's but for these, which a
# fork applies to its child and nothing reads while the server imports: det-lite's own (read
# when a trial runs, never at import), the run's, the shell's session. Any other difference (a
# CXX that torch's inductor reads at import, a PYTHONHASHSEED, a project's own variable) means a
# plain process: an unknown variable may shape the image, and a fork must not change a result.
PER_RUN = frozenset({SPEC_ENV, "DET_LITE_SUPERVISOR_PID", "DET_LITE_SUPERVISOR_HOST", "DET_LITE_HOME"})
PER_FORK = frozenset(
    {"OMP_NUM_THREADS", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES"}
    | {"PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLUMNS", "LINES", "COLORTERM"}
)
PER_FORK_PREFIXES = ("DET_LITE_", "SSH_", "TMUX", "TERM_PROGRAM", "XDG_SESSION")
READY_TIMEOUT_S = 120.0


def enabled(env: Dict[str, str]) -> bool:
    """Whether 1-slot workers may be forked (``DET_LITE_FORKSERVER=0`` says no)."""
    return env.get(FORKSERVER_ENV, os.environ.get(FORKSERVER_ENV, "1")).strip() not in ("0", "false", "no")


# Starts the worker as a plain process, its stdout and stderr on the given descriptor (the
# fallback when the server cannot fork it).
PlainStart = Callable[[int], "subprocess.Popen[bytes]"]
WAIT_STEP_S = 0.05  # how often a trial waiting for the warm-up looks whether it was stopped


def image_env(env: Dict[str, str]) -> Dict[str, str]:
    """The variables of ``env`` that must equal the server's for a trial to be forked: all but
    :data:`PER_FORK` and :data:`PER_FORK_PREFIXES` (see the module's docstring)."""
    return {k: v for k, v in env.items() if k not in PER_FORK and not k.startswith(PER_FORK_PREFIXES)}


def image_digest(env: Dict[str, str]) -> str:
    """:func:`image_env` hashed: what the info file records (no variable's value, a secret's
    included, is written there)."""
    return hashlib.sha256(json.dumps(sorted(image_env(env).items())).encode()).hexdigest()


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
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ForkServer:
    """The runner's connection to this installation's server: the one running already, or one
    it starts (see the module's docstring)."""

    def __init__(
        self, env: Dict[str, str], key: Optional[str] = None, idle_s: Optional[float] = None
    ) -> None:
        """``key``: the socket's name (default :func:`server_key`, the installation's; a Ray
        node's actor names the installation and the image: ``launch/_ray_node.py``). ``idle_s``:
        how long a server this starts stays without runners (default ``$DET_LITE_FORKSERVER_IDLE_S``
        of ``env``; a node actor's ends with the actors that use it: 0)."""
        self.key = key or server_key()
        self._idle_s = idle_s
        self.image: Optional[str] = None  # the digest of the environment its trials must have
        self.lost = False
        self.pid = 0  # the server's, once it said it is ready
        self._proc: Optional["subprocess.Popen[bytes]"] = None  # when this runner started it
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._children: Dict[int, ForkedChild] = {}
        self._next = 0
        self._sock = self._connect(env)
        threading.Thread(target=self._receive, name="det-lite-forkserver", daemon=True).start()

    def _connect(self, env: Dict[str, str]) -> socket.socket:
        """Connect to the key's server, or start one and connect to it, under the socket's lock
        (a server ends only under it: it never goes away between the two)."""
        directory, shared = runtime_dir()
        path = os.path.join(directory, f"fs-{self.key}.sock")
        idle_s = (
            env_seconds(FORKSERVER_IDLE_ENV, DEFAULT_IDLE_S, env) if self._idle_s is None else self._idle_s
        )
        idle_s = idle_s if shared else 0.0
        with _locked(path + ".lock"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(path)
                self.image = read_info(path).get("image")
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                pass  # none, or a dead one's name
            for stale in (path, info_path(path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stale)
            self._start_server(path, directory, idle_s, env)
            sock.connect(path)
            return sock

    def _start_server(self, path: str, directory: str, idle_s: float, env: Dict[str, str]) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server_env = {k: v for k, v in env.items() if k not in PER_RUN}
        try:
            listener.bind(path)
            listener.listen(64)
            self._proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "determined_lite.launch._forkserver_serve"]
                + [str(listener.fileno()), path, repr(idle_s)],
                env=server_env,
                cwd=directory,  # no project directory first on its sys.path
                pass_fds=(listener.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # import-time warnings are not any trial's
                start_new_session=True,  # a Ctrl-C meant for the runner's trials is not for it
            )
        finally:
            listener.close()
        self.image = image_digest(server_env)
        write_info(path, {"pid": self._proc.pid, "idle_s": idle_s, "image": self.image})
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
            child._set_exit(int(message["code"]))

    def spawn(
        self, argv: Sequence[str], env: Dict[str, str], cwd: str, pass_fds: Sequence[int], plain: PlainStart
    ) -> Optional[ForkedChild]:
        """A worker running ``argv``'s spec: forked now when the server is ready, else by a
        thread once it is (``plain`` starts it when the server cannot); None when the server is
        lost already or its image is not the one ``env`` asks for (the caller starts it plainly)."""
        if self.lost or self.image != image_digest(env):
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
        request["fds"] = list(pass_fds)  # the numbers the child finds them at (a worker reads some)
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

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Wait for the warm-up; whether the server can fork now. A caller that closes the
        descriptors it passes once :meth:`spawn` returns, or whose plain start must run in its
        own thread, asks first: :meth:`spawn` then starts the worker before it returns."""
        return self._ready.wait(timeout) and not self.lost

    def close(self) -> None:
        """Leave the server (it ends once idle: ``$DET_LITE_FORKSERVER_IDLE_S``)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


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
    """This installation's server, connected to or started now (its warm-up runs in the
    background); None when it is off or cannot start."""
    global _server
    if not enabled(env):
        return None
    with _server_lock:
        if _server is None or _server.lost:
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
