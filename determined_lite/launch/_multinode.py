"""One process supervising the torchrun agents of a multi-host trial.

``python -m determined_lite.launch._multinode PLAN_JSON`` (built by
``determined_lite.launch._torchrun.torchrun_command``) starts one agent per host — directly for
``localhost``/``127.0.0.1``, through ``ssh`` otherwise — forwards their output line by line,
and as soon as one agent fails, stops all the others. The trial thus stays one process (one
process group) for the launcher, whatever the number of hosts.

Stopping an agent: its stdin is closed (a remote agent sees the ssh connection go, a local one
the pipe; both then SIGTERM themselves, which makes torchrun stop their workers), then its
local process group gets SIGTERM and, after a grace period, SIGKILL.

Exit status: 0 when every agent succeeded, else 1; the first failure (read from the agents'
failure files, written next to the result file) is written into the trial's result file.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

from determined_lite.launch._failures import (
    STOP_GRACE_S,
    STOP_SIGNALS,
    stopped_exit_code,
    write_failure_result,
)
from determined_lite.launch._torchrun import AGENT_NAME, at_port, first_failure, publishing, remote_command
from determined_lite.runtime._failures import WorkerFailure, read_failures, remove_failures
from determined_lite.store._paths import restrict_umask

POLL_S = 0.05


class _Agent:
    """One agent process and the thread forwarding its output."""

    def __init__(
        self,
        index: int,
        host: str,
        argv: List[str],
        cwd: str,
        lock: threading.Lock,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.index = index
        self.host = host
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._lock = lock
        self._thread = threading.Thread(target=self._forward, name=f"agent-{index}-output", daemon=True)
        self._thread.start()

    def _forward(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._lock:
                sys.stdout.buffer.write(raw)
                sys.stdout.buffer.flush()

    def close_stdin(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def join_output(self) -> None:
        self._thread.join(timeout=5)


def _stop(agents: Sequence[_Agent]) -> None:
    """Stop every agent still running: stdin closed, SIGTERM, SIGKILL after the grace period."""
    running = [a for a in agents if a.proc.poll() is None]
    for a in running:
        a.close_stdin()
        a.signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(a.proc.poll() is None for a in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for a in agents:
        a.signal(signal.SIGKILL)  # whatever is left in the agents' process groups
        a.proc.wait()


def _start_agents(plan: Dict[str, Any], stop_signal: List[int]) -> List[_Agent]:
    """Start the agents of ``plan``. With ``publish``, the first agent binds the rendezvous
    store itself and writes its port on a pipe; the others start once it did, with that port
    (none starts when the first agent ended first, or a stop signal came)."""
    lock, env, plans = threading.Lock(), dict(os.environ), plan["agents"]

    def start(i: int, argv: List[str], pass_fds: Sequence[int] = ()) -> _Agent:
        if not plans[i]["local"]:
            argv = remote_command(plans[i]["host"], argv, plan["cwd"], env)
        return _Agent(i, plans[i]["host"], argv, plan["cwd"], lock, pass_fds)

    if not plan.get("publish"):
        return [start(i, a["argv"]) for i, a in enumerate(plans)]
    read_fd, write_fd = os.pipe()
    agents = [start(0, publishing(plans[0]["argv"], write_fd), (write_fd,))]
    os.close(write_fd)
    with os.fdopen(read_fd) as published:
        while not stop_signal and not select.select([published], [], [], POLL_S)[0]:
            pass
        port = published.readline().strip() if not stop_signal else ""
    if port.isdigit():
        agents += [start(i, at_port(a["argv"], int(port))) for i, a in enumerate(plans) if i]
    return agents


def supervise(plan: Dict[str, Any]) -> int:
    """Run the agents of ``plan``; 0 when all succeed, else 1 (after stopping the others)."""
    remove_failures(plan["failure_files"])
    stop_signal: List[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop_signal.append(signum)

    for name in STOP_SIGNALS:
        signal.signal(signal.Signals[name], on_signal)

    agents = _start_agents(plan, stop_signal)

    failed: Optional[_Agent] = None
    while not stop_signal:
        codes = [a.proc.poll() for a in agents]
        failed = next((a for a, c in zip(agents, codes) if c not in (None, 0)), None)
        if failed is not None or all(c == 0 for c in codes):
            break
        time.sleep(POLL_S)
    _stop(agents)
    for a in agents:
        a.join_output()
    if stop_signal:
        sys.stderr.write(f"det-lite: stopped the trial's agents ({signal.Signals(stop_signal[0]).name})\n")
        return stopped_exit_code(stop_signal[0])
    if failed is None:
        return 0
    failures = read_failures(plan["failure_files"])
    remove_failures(plan["failure_files"])
    failure = first_failure(failures)
    if failure is None:
        failure = WorkerFailure(rank=None, node=failed.host, exit_code=failed.proc.returncode)
        sys.stderr.write(
            f"det-lite: {AGENT_NAME} on {failed.host} exited with code {failed.proc.returncode}; "
            "stopped the other agents\n"
        )
    write_failure_result(plan["result"], failure.describe(AGENT_NAME))
    return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    restrict_umask()
    if len(argv) != 1:
        sys.stderr.write("usage: python -m determined_lite.launch._multinode PLAN_JSON\n")
        return 2
    return supervise(json.loads(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
