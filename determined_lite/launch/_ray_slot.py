"""What runs on a Ray node for ``resources.executor: ray``: one slot's actor and the storage probe.

:class:`SlotWorker` becomes a Ray actor (``launch/_ray.py`` wraps it with ``ray.remote``), one per
bundle of the trial's placement group. It starts det-lite's unchanged worker process
(``python -m determined_lite.launch.worker SPEC``) as a subprocess in its own process group, so
resume, the stall watchdog, fail-fast and checkpoints behave as with the local launcher. The
worker's output lines and its store records (JSON lines on a pipe, ``reporting/_sink.py``) are
buffered here until the driver takes them (:meth:`SlotWorker.take`), in order; the driver's
answers to the chief's store questions go back on a second pipe (:meth:`SlotWorker.answer`). The
pause/kill flag flows back as a file on this node every rank's poll reads
(:meth:`SlotWorker.request_stop`). The worker's spec, context and files are this slot's own
(``_ray_data.py``): what it writes comes back with its output.

No worker outlives its slot: the worker gets SIGKILL when this actor's process dies
(``PR_SET_PDEATHSIG``, e.g. ``ray.kill`` or a lost node), and it watches this actor's pid as the
local launcher's workers watch their supervisor (``DET_LITE_SUPERVISOR_PID``).

This module imports nothing from Ray at import time: the probe and the actor are plain Python.
"""

from __future__ import annotations

import collections
import contextlib
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
import weakref
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from determined_lite.launch._engines import Rendezvous, engine
from determined_lite.launch._failures import worker_command
from determined_lite.launch._forkserver import ForkedChild, ForkServer
from determined_lite.launch._ray_data import FileMirror, node_home, node_spec, restore_here, unpack_context
from determined_lite.launch._slots import Slot
from determined_lite.reporting._sink import ANSWER_FD_ENV, REPORT_FD_ENV, STOP_FILE_ENV
from determined_lite.runtime._cluster import SPEC_ENV
from determined_lite.runtime._spec import WorkerSpec

STORAGE_VIEW_ENV = "DET_LITE_TEST_STORAGE_VIEW"  # tests: this node sees storage under another root
ServerFor = Callable[[Dict[str, str]], Optional[ForkServer]]  # a worker's environment -> its server


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


def probe_storage(config: Dict[str, Any], files: Dict[str, str]) -> Dict[str, Any]:
    """What this node cannot reach of what a run needs (None when nothing): a cloud checkpoint
    storage (a key written, read back and deleted: ``config`` holds its secrets) or, on a file
    system, ``files`` (path -> the token the driver wrote there) read back as they are."""
    problem: Optional[str] = None
    for path, token in files.items():
        try:
            with open(node_view(path)) as f:
                seen = f.read() == token
        except OSError:
            seen = False
        if not seen:
            problem = (
                f"does not see the checkpoint storage {os.path.dirname(path)}: checkpoint_storage.host_path "
                "must be a file system every node mounts at the same path (or use s3, gcs or azure)"
            )
            break
    if not files:
        from determined_lite.storage import StorageError, checkpoint_storage

        try:
            checkpoint_storage(config).probe()
        except StorageError as e:
            problem = f"cannot use the checkpoint storage: {e}"
    return {"host": socket.gethostname(), "problem": problem}


# What Ray sets for its own worker processes (this actor's): not the trial's. The worker's
# environment is the node's without them, so that it is the same for every run of a node (a
# new job id per experiment, a raylet per node) and its fork server's image stays warm.
RAY_WORKER_ENV = frozenset({"RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_LD_PRELOAD_ON_WORKERS", "SPT_NOENV"})
RAY_BREAKPOINT = "ray.util.rpdb.set_trace"


def node_environ() -> Dict[str, str]:
    """This node's environment as a slot's worker starts with it (Ray's own variables left out)."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_WORKER_ENV}
    if env.get("PYTHONBREAKPOINT") == RAY_BREAKPOINT:
        del env["PYTHONBREAKPOINT"]
    return env


class SlotWorker:
    """One slot of a trial on one node: its worker process, output and store records.

    ``server``: the node's fork server for a worker's environment (``_ray_node.py``): the worker
    is forked from it when that environment's image is the server's (as a local 1-slot worker
    is), else started as a plain process, as it always is without one."""

    def __init__(self, server: Optional[ServerFor] = None) -> None:
        self._server = server
        self._proc: Any = None  # subprocess.Popen, or a ForkedChild of the node's server
        self._lines: Deque[str] = collections.deque()
        self._records: Deque[str] = collections.deque()
        self._changed = threading.Condition()
        self._readers: List[threading.Thread] = []
        self._dir = tempfile.mkdtemp(prefix="det-lite-slot-")
        self._stop_file = os.path.join(self._dir, "stop")
        self._answers: Any = None  # the write end of the worker's answer pipe
        self._pids: List[int] = []
        self._mirror: Optional[FileMirror] = None
        self._rendezvous: Optional[Rendezvous] = None  # rank 0's: where the gang meets
        self._release = weakref.finalize(self, _release_slot, self._dir, self._pids)

    def node(self) -> Dict[str, Any]:
        """Where this slot is: node id, IP address, host name, this actor's process id, and the
        GPU ids Ray gave this actor there."""
        import ray

        runtime = ray.get_runtime_context()
        gpus = [str(g) for g in runtime.get_accelerator_ids().get("GPU", [])]
        ip, host = ray.util.get_node_ip_address(), socket.gethostname()
        return {"node_id": runtime.get_node_id(), "ip": ip, "host": host, "pid": os.getpid(), "gpus": gpus}

    def host_rendezvous(self, backend: str, slots: List[Dict[str, Any]]) -> Dict[str, str]:
        """Start the gang's rendezvous of engine ``backend`` here (rank 0's slot, on its node's
        address), held until this actor ends; what it publishes for every rank."""
        import ray

        if self._rendezvous is not None:
            self._rendezvous.close()
        places = [Slot(**dict(s, gpus=tuple(s["gpus"]))) for s in slots]
        self._rendezvous = engine(backend).rendezvous(ray.util.get_node_ip_address(), places)
        return self._rendezvous.env()

    def rendezvous_port(self) -> Optional[int]:
        """The port of the rendezvous this slot hosts (None: none)."""
        return None if self._rendezvous is None else self._rendezvous.port()

    def start(
        self,
        env: Dict[str, str],
        fields: Dict[str, Any],
        context: Tuple[str, bytes],
        secrets: Dict[str, str],
        warm: Optional[Tuple[str, bytes]] = None,
    ) -> int:
        """Start the worker process of the spec ``fields`` with ``env`` on top of this node's
        environment: its context unpacked from ``context`` (key, archive) into this node's cache,
        and so the warm-start checkpoint from ``warm``; its files in this slot's directory
        (``_ray_data.node_spec``)."""
        import ray

        spec = node_spec(fields, self._dir, unpack_context(*context))
        if warm is not None:
            spec["warm_start"] = unpack_context(*warm)
        home = node_home(self._dir)
        restore_here(spec, secrets, home)
        spec_path = WorkerSpec(**spec).save(os.path.join(self._dir, "spec.json"))
        self._mirror = FileMirror(os.path.dirname(spec["result_path"]), spec["tensorboard_path"])
        read_fd, write_fd = os.pipe()
        answer_read, answer_write = os.pipe()
        # The engine's interface variables as this node has them; the driver's only when it
        # passed them explicitly (in ``env``). Ray's own variables are left out (node_environ).
        own = node_environ()
        full_env = engine(fields["backend"]).node_env(ray.util.get_node_ip_address(), own)
        full_env.update(own)
        full_env.update(env)
        full_env.update({"DET_LITE_HOME": home, SPEC_ENV: spec_path})
        full_env[REPORT_FD_ENV] = str(write_fd)
        full_env[ANSWER_FD_ENV] = str(answer_read)
        full_env[STOP_FILE_ENV] = self._stop_file
        full_env["DET_LITE_SUPERVISOR_PID"] = str(os.getpid())
        full_env["DET_LITE_SUPERVISOR_HOST"] = socket.gethostname()
        proc = self._spawn(worker_command(spec_path), full_env, spec["context_dir"], (write_fd, answer_read))
        self._started(proc)
        os.close(write_fd)
        os.close(answer_read)
        self._answers = os.fdopen(answer_write, "w", buffering=1, encoding="utf-8")
        records = os.fdopen(read_fd, "rb")
        assert proc.stdout is not None
        for stream, sink in ((proc.stdout, self._lines), (records, self._records)):
            reader = threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
            reader.start()
            self._readers.append(reader)
        threading.Thread(target=self._notify_exit, args=(proc,), name="det-lite-exit", daemon=True).start()
        return int(proc.pid)

    def _notify_exit(self, proc: Any) -> None:
        """Wake a waiting :meth:`take` as soon as the worker exited and its output was read
        (instead of at its next periodic look)."""
        proc.wait()
        for reader in self._readers:
            reader.join()
        with self._changed:
            self._changed.notify_all()

    def _spawn(self, argv: List[str], env: Dict[str, str], cwd: str, fds: Tuple[int, int]) -> Any:
        """The worker: forked by the node's server when it can be (a CPU worker whose image is
        the server's), else a plain process (its output on a pipe)."""

        def plain(stdout: int) -> "subprocess.Popen[bytes]":
            return subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                umask=0o077,
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

        gpus = env.get("CUDA_VISIBLE_DEVICES")  # a fork of a process that may have touched CUDA cannot use it
        server = self._server(env) if self._server is not None and not gpus else None
        if server is not None and server.wait_ready():  # forked (or started) before spawn returns:
            child = server.spawn(argv, env, cwd, fds, plain)  # the caller closes ``fds`` then
            if child is not None:
                return child
        return plain(subprocess.PIPE)

    def _pump(self, stream: Any, sink: Deque[str]) -> None:
        with stream:
            for raw in stream:  # bytes from a plain worker's pipe, text from a forked one's
                line = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
                with self._changed:
                    sink.append(line.rstrip("\n"))
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
        files = self._mirror.changes() if self._mirror is not None else None  # after the exit: all
        return {"lines": lines, "records": records, "exit": code, "files": files}

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
        if isinstance(self._proc, ForkedChild):
            self._proc.kill_group(sig)  # one still waiting for the server never starts
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _started(self, proc: Any) -> None:
        self._proc = proc
        if not isinstance(proc, ForkedChild):
            self._pids.append(proc.pid)

    def close(self) -> None:
        """The run ended: its worker's group killed, this slot's directory removed (what a
        slot's actor leaves when it is killed; a node's actor outlives its runs)."""
        if self._proc is not None:
            self._signal(signal.SIGKILL)
        if self._answers is not None:
            with contextlib.suppress(OSError):
                self._answers.close()
        if self._rendezvous is not None:
            self._rendezvous.close()
            self._rendezvous = None
        self._release()


def _release_slot(directory: str, pids: List[int]) -> None:
    """When a slot's actor object goes: its worker's group is killed, its directory removed. A
    finalizer of the instance, not ``__del__``: Ray's actor handle class derives from
    :class:`SlotWorker`, and a ``__del__`` would run (and fail) on the driver's handle too."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    shutil.rmtree(directory, ignore_errors=True)
