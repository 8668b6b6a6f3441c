"""Where this user's fork servers are, what identifies one, and what lists and stops them
(``det-lite server list`` / ``stop``; ``launch/_forkserver.py`` starts and uses them).

A server's socket is ``<runtime dir>/det-lite-<uid>/fs-<key>.sock`` (:func:`runtime_dir`, a
directory only the user can enter), ``key`` being :func:`server_key` (the installation: at most
one server per user and installation). The runner that starts a server writes its info file
next to it (``fs-<key>.json``: pid, installation, idle time, the digest of the environment its
trials must have); the server removes both as it ends.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import stat
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import psutil

import determined_lite

DEFAULT_IDLE_S = 600.0
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


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


def server_key() -> str:
    """This installation, hashed: the one server of this user's runners that use it."""
    parts = [sys.executable, sys.version, _files_stamp()]
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


def info_path(socket_path: str) -> str:
    """The info file of the server at ``socket_path``."""
    return os.path.splitext(socket_path)[0] + ".json"


def write_info(path: str, info: Dict[str, Any]) -> None:
    """The info file of the server just started at socket ``path`` (under the socket's lock)."""
    torch_spec = importlib.util.find_spec("torch")
    info = dict(
        info,
        socket=path,
        python=sys.executable,
        det_lite=os.path.dirname(os.path.abspath(determined_lite.__file__)),
        torch=torch_spec.origin if torch_spec is not None else None,
        started=time.time(),
    )
    target = info_path(path)
    fd = os.open(target + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(target + ".tmp", target)


def read_info(path: str) -> Dict[str, Any]:
    """The info file of the server at socket ``path`` ({} when missing or unreadable)."""
    try:
        with open(info_path(path)) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """One of this user's running fork servers."""

    pid: int
    socket: str
    det_lite: str  # the installation's package directory
    python: str
    started: float  # seconds since the epoch
    idle_s: float  # how long it stays with no runner
    rss: int  # resident memory, bytes (pages shared with its children counted once, here)
    children: int  # trials it forked that still run

    @property
    def this_installation(self) -> bool:
        return self.socket.endswith(f"fs-{server_key()}.sock")


def servers() -> List[ServerInfo]:
    """This user's running fork servers, oldest first (their info files in :func:`runtime_dir`)."""
    directory, shared = runtime_dir()
    if not shared:  # a new private directory: no server is there
        os.rmdir(directory)
        return []
    found = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("fs-") and name.endswith(".sock"):
            info = _live(os.path.join(directory, name))
            if info is not None:
                found.append(info)
    return sorted(found, key=lambda s: s.started)


def _live(path: str) -> Optional[ServerInfo]:
    """The server at socket ``path`` when its recorded process runs and serves that socket."""
    info = read_info(path)
    try:
        proc = psutil.Process(int(info["pid"]))
        if path not in proc.cmdline() or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return ServerInfo(
            pid=proc.pid,
            socket=path,
            det_lite=str(info.get("det_lite", "")),
            python=str(info.get("python", "")),
            started=float(info.get("started", proc.create_time())),
            idle_s=float(info.get("idle_s", DEFAULT_IDLE_S)),
            rss=proc.memory_info().rss,
            children=len(proc.children()),
        )
    except (KeyError, TypeError, ValueError, psutil.Error):
        return None


def stop_server(server: ServerInfo, timeout: float = 10.0) -> bool:
    """Ask ``server`` to end (SIGTERM: it removes its socket and ends; the trials it forked run
    on) and wait for it; whether it is gone."""
    try:
        proc = psutil.Process(server.pid)
        if server.socket not in proc.cmdline():
            return True  # not that server any more
        proc.terminate()
        proc.wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except (psutil.TimeoutExpired, psutil.Error):
        return False
    return True
