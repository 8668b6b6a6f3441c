"""Start a trial's workers and watch them: one process group per trial.

One slot runs one worker process; N slots go through the engine's own launcher
(``horovodrun`` or ``torch.distributed.run``), which starts N workers on this host or on the
hosts listed in ``resources.hosts``. Output of every worker is read line by line (already
rank-prefixed by the worker) and handed to ``on_output``. The trial's processes run with a
private umask (``store._paths.private_umask``): their files are 0600, their directories 0700.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import determined_lite
from determined_lite.launch import _forkserver
from determined_lite.launch._engines import engine_command
from determined_lite.launch._failures import STOP_GRACE_S, worker_command
from determined_lite.launch._startup_hook import with_startup_hook
from determined_lite.runtime._cluster import SPEC_ENV
from determined_lite.runtime._spec import WorkerResult, WorkerSpec
from determined_lite.store._paths import private_umask

OutputFn = Callable[[str], None]


class TrialProcess:
    """The running workers of one trial (a process group we can wait on and stop)."""

    def __init__(
        self,
        argv: List[str],
        env: Dict[str, str],
        on_output: Optional[OutputFn],
        cwd: str,
        pass_fds: Sequence[int] = (),
        forked: Optional[_forkserver.ForkedChild] = None,
        on_end: Optional[Callable[[], None]] = None,
    ) -> None:
        self.argv = argv
        self._proc: Union["subprocess.Popen[str]", _forkserver.ForkedChild]
        self._proc = forked or _popen(argv, env, cwd, pass_fds, subprocess.PIPE)
        self._on_output = on_output
        self._on_end = on_end
        self._reader = threading.Thread(target=self._pump, name="trial-output", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The first process's id (0 while a forked worker waits for the fork server)."""
        return self._proc.pid

    def _pump(self) -> None:
        """Hand on every output line; at the end of the output (the workers closed it, as they
        do when they exit), wait for the process and call ``on_end``."""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if self._on_output is not None:
                self._on_output(line.rstrip("\n"))
            else:
                sys.stdout.write(line)
        if self._on_end is not None:
            self._proc.wait()
            self._on_end()

    def poll(self) -> Optional[int]:
        return self._proc.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self._proc.wait(timeout)
        self._reader.join(timeout=5)
        # Whatever the launcher left behind (a worker that outlived it) goes with it.
        self._kill_group(signal.SIGKILL)
        return code

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """SIGTERM the whole process group, SIGKILL what is left after ``grace`` seconds."""
        if self._proc.poll() is None:
            self._kill_group(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self._proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        self._kill_group(signal.SIGKILL)
        return self.wait()

    def _kill_group(self, sig: int) -> None:
        if isinstance(self._proc, _forkserver.ForkedChild):
            self._proc.kill_group(sig)  # one that has not started yet never starts
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _popen(argv: List[str], env: Dict[str, str], cwd: str, pass_fds: Sequence[int], stdout: int) -> Any:
    """A trial's first process in its own session (``stop()`` signals its group), output and
    errors to ``stdout`` (``subprocess.PIPE``: read as text by the caller)."""
    piped = stdout == subprocess.PIPE
    text: Dict[str, Any] = {"text": True, "bufsize": 1, "errors": "replace"} if piped else {}
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        umask=private_umask(),
        pass_fds=tuple(pass_fds),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stop() reaches every worker
        **text,
    )


def launch(
    spec: WorkerSpec,
    spec_path: str,
    *,
    hosts: Optional[Sequence[str]] = None,
    on_output: Optional[OutputFn] = None,
    env: Optional[Dict[str, str]] = None,
    pass_fds: Sequence[int] = (),
    on_end: Optional[Callable[[], None]] = None,
) -> TrialProcess:
    """Write ``spec`` to ``spec_path`` and start the trial's workers.

    ``pass_fds``: file descriptors the trial's first process inherits (the experiment's runner
    lock, held until that process exits); ``on_end``: called from the output's reader thread
    once the output ended and the first process exited.
    """
    spec.save(spec_path)
    argv, engine_env = engine_command(spec, spec_path, hosts)
    full_env = _worker_env(env, engine_env)
    full_env[SPEC_ENV] = os.path.abspath(spec_path)  # det.get_cluster_info() reads it
    argv = with_startup_hook(argv, spec.context_dir)  # Determined sources it before the trial
    # A 1-slot CPU worker is forked from a warm server when it can be (launch/_forkserver.py); a
    # worker given GPUs starts plainly (a fork of a process that may have touched CUDA cannot use it).
    one_worker = argv == worker_command(spec_path) and not full_env.get("CUDA_VISIBLE_DEVICES")
    forked = None
    if one_worker:
        plain = functools.partial(_popen, argv, full_env, spec.context_dir, pass_fds)
        forked = _forkserver.spawn(argv, full_env, spec.context_dir, pass_fds, plain)
    return TrialProcess(
        argv, full_env, on_output, cwd=spec.context_dir, pass_fds=pass_fds, forked=forked, on_end=on_end
    )


def _worker_env(env: Optional[Dict[str, str]], engine_env: Dict[str, str]) -> Dict[str, str]:
    """A trial's environment but for its spec's path: this process's, ``env`` and the engine's."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.update(engine_env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    # Workers run in the context directory: make sure they import this determined_lite.
    root = os.path.dirname(os.path.dirname(os.path.abspath(determined_lite.__file__)))
    paths = [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        full_env["PYTHONPATH"] = os.pathsep.join([root] + paths)
    full_env["DET_LITE_SUPERVISOR_PID"] = str(os.getpid())
    full_env["DET_LITE_SUPERVISOR_HOST"] = socket.gethostname()
    return full_env


def prestart(context_dir: str, env: Optional[Dict[str, str]] = None) -> None:
    """Start the fork server for the plain 1-slot CPU workers :func:`launch` will start with
    ``env`` now, so that its warm-up (imports, seconds) runs while the runner prepares the
    first trials instead of before them. Nothing for a context with a startup hook (its workers
    are never forked) or GPUs."""
    full_env = _worker_env(env, {})
    if with_startup_hook([], context_dir) or full_env.get("CUDA_VISIBLE_DEVICES"):
        return
    _forkserver.start(full_env)


def run_trial(
    spec: WorkerSpec,
    spec_path: str,
    *,
    hosts: Optional[Sequence[str]] = None,
    on_output: Optional[OutputFn] = None,
    env: Optional[Dict[str, str]] = None,
    timeout: Optional[float] = None,
) -> Tuple[int, WorkerResult]:
    """Launch, wait, and read the chief's result (an ``error`` result when it wrote none)."""
    if os.path.exists(spec.result_path):
        os.unlink(spec.result_path)
    proc = launch(spec, spec_path, hosts=hosts, on_output=on_output, env=env)
    try:
        code = proc.wait(timeout)
    except BaseException:  # a timeout, Ctrl-C or anything else: never leave workers behind
        proc.stop()
        raise
    result = WorkerResult.after_exit(spec.result_path, code)
    return code, result
