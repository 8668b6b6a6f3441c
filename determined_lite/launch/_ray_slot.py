"""What runs on a Ray node for ``resources.executor: ray``: one slot's actor and the storage probe.

:class:`SlotWorker` becomes a Ray actor (``launch/_ray.py`` wraps it with ``ray.remote``), one per
bundle of the trial's placement group. It starts det-lite's unchanged worker process
(``python -m determined_lite.launch.worker SPEC``) as a subprocess in its own process group, so
resume, the stall watchdog, fail-fast and checkpoints behave as with the local launcher. The
worker's output lines and its store records (JSON lines on a pipe, ``reporting/_sink.py``) are
buffered here until the driver takes them (:meth:`SlotWorker.take`), in order; the driver's
answers to the chief's store questions go back on a second pipe (:meth:`SlotWorker.answer`). The
pause/kill flag flows back as a file on this node every rank's poll reads
(:meth:`SlotWorker.request_stop`).

No worker outlives its slot: the worker gets SIGKILL when this actor's process dies
(``PR_SET_PDEATHSIG``, e.g. ``ray.kill`` or a lost node), and it watches this actor's pid as the
local launcher's workers watch their supervisor (``DET_LITE_SUPERVISOR_PID``).

This module imports nothing from Ray at import time: the probe and the actor are plain Python.
"""

from __future__ import annotations

import collections
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence

from determined_lite.reporting._sink import ANSWER_FD_ENV, REPORT_FD_ENV, STOP_FILE_ENV

STORAGE_VIEW_ENV = "DET_LITE_TEST_STORAGE_VIEW"  # tests: this node sees storage under another root


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the actor's process dies (Linux)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def node_view(path: str) -> str:
    """``path`` as this node sees it (a test node may be given another storage view)."""
    root = os.environ.get(STORAGE_VIEW_ENV)
    return os.path.join(root, path.lstrip(os.sep)) if root else path


def probe_storage(files: Dict[str, str]) -> Dict[str, Any]:
    """Which of ``files`` (path -> the token the driver wrote there) this node reads back as is."""
    unseen = []
    for path, token in files.items():
        try:
            with open(node_view(path)) as f:
                if f.read() != token:
                    unseen.append(path)
        except OSError:
            unseen.append(path)
    return {"host": socket.gethostname(), "unseen": unseen}


class SlotWorker:
    """One slot of a trial on one node: its worker process, output and store records."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None
        self._lines: Deque[str] = collections.deque()
        self._records: Deque[str] = collections.deque()
        self._changed = threading.Condition()
        self._readers: List[threading.Thread] = []
        self._dir = tempfile.mkdtemp(prefix="det-lite-slot-")
        self._stop_file = os.path.join(self._dir, "stop")
        self._answers: Any = None  # the write end of the worker's answer pipe

    def node(self) -> Dict[str, Any]:
        """Where this slot is: node id, IP address, host name, and a free port on this node."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            port = int(s.getsockname()[1])
        node_id = ray.get_runtime_context().get_node_id()
        return {"node_id": node_id, "ip": ip, "host": socket.gethostname(), "port": port}

    def start(self, argv: Sequence[str], env: Dict[str, str], cwd: str) -> int:
        """Start the worker process with ``env`` on top of this node's environment."""
        read_fd, write_fd = os.pipe()
        answer_read, answer_write = os.pipe()
        full_env = dict(os.environ)
        full_env.update(env)
        full_env[REPORT_FD_ENV] = str(write_fd)
        full_env[ANSWER_FD_ENV] = str(answer_read)
        full_env[STOP_FILE_ENV] = self._stop_file
        full_env["DET_LITE_SUPERVISOR_PID"] = str(os.getpid())
        full_env["DET_LITE_SUPERVISOR_HOST"] = socket.gethostname()
        self._proc = subprocess.Popen(
            list(argv),
            env=full_env,
            cwd=cwd,
            umask=0o077,
            pass_fds=(write_fd, answer_read),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        os.close(write_fd)
        os.close(answer_read)
        self._answers = os.fdopen(answer_write, "w", buffering=1, encoding="utf-8")
        records = os.fdopen(read_fd, "rb")
        assert self._proc.stdout is not None
        for stream, sink in ((self._proc.stdout, self._lines), (records, self._records)):
            reader = threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
            reader.start()
            self._readers.append(reader)
        return self._proc.pid

    def _pump(self, stream: Any, sink: Deque[str]) -> None:
        with stream:
            for raw in stream:
                with self._changed:
                    sink.append(raw.decode("utf-8", "replace").rstrip("\n"))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _exit_code(self) -> Optional[int]:
        if self._proc is None or self._proc.poll() is None:
            return None
        if any(r.is_alive() for r in self._readers):
            return None  # output still to read
        return self._proc.returncode

    def take(self, timeout: float) -> Dict[str, Any]:
        """Output lines and store records since the last call (waiting up to ``timeout`` for
        some), and the worker's exit code once it exited and everything it wrote was read."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._lines and not self._records and self._exit_code() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.2))
            lines, records = list(self._lines), list(self._records)
            self._lines.clear()
            self._records.clear()
        code = self._exit_code() if not lines and not records else None
        return {"lines": lines, "records": records, "exit": code}

    def answer(self, line: str) -> None:
        """The driver's answer to the worker's latest question (``reporting/_sink.py``)."""
        try:
            self._answers.write(line + "\n")
            self._answers.flush()
        except (BrokenPipeError, ValueError, AttributeError):
            pass  # the worker is gone (or never started): nobody waits for it

    def request_stop(self) -> None:
        """The experiment was paused or killed: the chief's sink sees it at its next poll."""
        with open(self._stop_file, "w"):
            pass

    def stop(self, grace: float) -> None:
        """SIGTERM the worker's process group, SIGKILL what is left after ``grace`` seconds."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        self._signal(signal.SIGKILL)
        self._proc.wait()

    def _signal(self, sig: int) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __del__(self) -> None:
        if self._proc is not None:
            self._signal(signal.SIGKILL)
        shutil.rmtree(self._dir, ignore_errors=True)
