"""One runner per experiment: an exclusive ``flock`` on ``<home>/experiments/<id>/runner.lock``.

Taken by ``experiment create`` / ``activate`` and held until the runner and the trial processes
it handed the file to have exited (the kernel drops it, SIGKILL included: no stale lock). The
holder writes ``{"pid", "token", "phase"}`` into it for contenders' messages: a live holder
``running`` stops a contender at once (exit 2); one ``stopping`` or gone is waited for, at most
``$DET_LITE_ACTIVATE_WAIT`` seconds. The contract: docs/design.md, "One runner per experiment".
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sys
import time
from typing import List, Optional, TextIO

from determined_lite._enums import TextEnum
from determined_lite._timeouts import ACTIVATE_WAIT_ENV as WAIT_ENV
from determined_lite._timeouts import env_seconds
from determined_lite.experiment._exit import ActivationRefused
from determined_lite.store._paths import RUNNER_LOCK as LOCK_FILE
from determined_lite.store._paths import experiment_dir, open_private, process_alive, process_token

DEFAULT_WAIT_S = 60.0
POLL_S = 0.1


class RunnerPhase(TextEnum):
    """What the lock's holder is doing (the ``phase`` in the lock file)."""

    RUNNING = "running"  # runs the experiment, or is about to
    STOPPING = "stopping"  # done (paused, ended): exiting


class ExperimentLocked(ActivationRefused):
    """Another process runs the experiment, or its previous run did not exit in time (exit 2)."""


def wait_seconds() -> float:
    """``$DET_LITE_ACTIVATE_WAIT``: how long to wait for a previous run to exit."""
    try:
        return env_seconds(WAIT_ENV, DEFAULT_WAIT_S)
    except ValueError as e:
        raise ExperimentLocked(str(e)) from None


@dataclasses.dataclass
class LockHolder:
    """Who wrote the lock file last."""

    pid: int
    token: Optional[str]
    phase: str

    def alive(self) -> bool:
        return process_alive(self.pid, self.token)


def read_holder(path: str) -> Optional[LockHolder]:
    """The holder recorded in the lock file; None when missing, empty or being rewritten."""
    try:
        with open(path) as f:
            data = json.load(f)
        return LockHolder(pid=int(data["pid"]), token=data.get("token"), phase=str(data["phase"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def processes_holding(path: str) -> List[int]:
    """Pids of this user's processes with ``path`` open (others' are not readable)."""
    import psutil  # here: only a refusal names them

    target = os.path.realpath(path)
    found = []
    for proc in psutil.process_iter():
        try:
            if any(f.path == target for f in proc.open_files()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return sorted(found)


class RunnerLock:
    """This process's hold on an experiment's runner lock (an open, ``flock``-ed file)."""

    def __init__(self, fd: int, path: str) -> None:
        self._fd: Optional[int] = fd
        self.path = path

    @classmethod
    def try_take(cls, path: str) -> Optional["RunnerLock"]:
        """The lock, or None when another open file holds it (never blocks)."""
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    @classmethod
    def adopt(cls, fd: int, path: str) -> "RunnerLock":
        """The lock handed over by the process that took it (``--detach``): an inherited fd."""
        os.fstat(fd)  # fails now, clearly, if nothing was handed over
        return cls(fd, path)

    def fileno(self) -> int:
        """The descriptor to pass to child processes that must keep the lock while they run."""
        if self._fd is None:
            raise ValueError(f"the runner lock {self.path} was released")
        return self._fd

    def record(self, pid: int, phase: RunnerPhase) -> None:
        """Write who holds the lock and what it does (for contenders' messages)."""
        data = json.dumps({"pid": pid, "token": process_token(pid), "phase": phase}).encode()
        fd = self.fileno()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def release(self) -> None:
        """Close this process's descriptor; the lock is free once no other process holds it
        (children it was handed to keep it). Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def take_runner_lock(
    experiment_id: int, wait_s: Optional[float] = None, out: Optional[TextIO] = None
) -> RunnerLock:
    """Take experiment ``experiment_id``'s runner lock for this process (phase ``running``).

    Raises ``ExperimentLocked`` at once when a live process runs the experiment, or after
    ``wait_s`` (default :func:`wait_seconds`) when the processes of a previous run hold the
    lock that long; says on ``out`` (default stderr) when it starts waiting.
    """
    from determined_lite.store._paths import make_private_dirs

    directory = make_private_dirs(experiment_dir(experiment_id))
    path = os.path.join(directory, LOCK_FILE)
    limit = wait_seconds() if wait_s is None else wait_s
    start = time.monotonic()
    waiting = False
    while True:
        lock = RunnerLock.try_take(path)
        if lock is not None:
            lock.record(os.getpid(), RunnerPhase.RUNNING)
            return lock
        holder = read_holder(path)
        if holder is not None and holder.phase == RunnerPhase.RUNNING and holder.alive():
            raise ExperimentLocked(
                f"experiment {experiment_id} is already running in process {holder.pid}; "
                f"pause or kill it first (det-lite experiment pause {experiment_id})"
            )
        if time.monotonic() - start >= limit:
            pids = processes_holding(path)
            who = f"process(es) {', '.join(map(str, pids))}" if pids else "other processes"
            raise ExperimentLocked(
                f"experiment {experiment_id}: its previous run has not exited after {limit:g} s "
                f"({who} still hold {path}); stop them, or wait longer with {WAIT_ENV}=SECONDS"
            )
        if not waiting and (holder is not None or time.monotonic() - start > 1.0):
            waiting = True  # (no holder yet: the winner is writing its record; say nothing)
            what = f"process {holder.pid}" if holder is not None else "its processes"
            print(
                f"Waiting for the previous run of experiment {experiment_id} ({what}) to exit "
                f"(at most {limit:g} s)...",
                file=out or sys.stderr,
                flush=True,
            )
        time.sleep(POLL_S)
