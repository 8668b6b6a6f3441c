"""Start a trial's workers with ``torch.distributed.run`` (torchrun) and report how they ended.

One host (``resources.hosts`` unset): one torchrun agent starts ``resources.slots_per_trial``
workers on this machine, joined by torchrun's static rendezvous on 127.0.0.1 (``--nnodes 1
--rdzv-backend static --master-addr 127.0.0.1 --local-addr 127.0.0.1``).

Listeners: torch's TCPStore server listens on every interface whatever address it is given;
so when every host is this machine, the agent that hosts the rendezvous (``--listen-address``)
creates that store itself first, on a socket bound to 127.0.0.1 (``master_listen_fd``), and
torchrun's static rendezvous reuses it (``multi_tenant``). Workers share the agent's store and
bind Gloo/NCCL to the loopback interface (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``).

Several hosts (``resources.hosts: ["host-a:2", "host-b:2"]``, slot counts summing to
``slots_per_trial``): one agent per host, joined by torchrun's static rendezvous on the first
host (``--nnodes H --node-rank i --master-addr host0 --master-port P``). The static rendezvous
gives host ``i`` the ranks after those of hosts ``0..i-1``, so the chief (rank 0) always runs on
the first host. ``determined_lite.launch._multinode`` supervises the agents as one process.
Requirements for remote hosts:

- passwordless ``ssh HOST`` from this machine (``$DET_LITE_SSH`` replaces the ``ssh`` command,
  e.g. ``"ssh -p 2222"``);
- the same Python at the same path (``sys.executable``) with determined_lite and torch
  installed, and the trial's context directory and the experiment's storage
  (``$DET_LITE_HOME``, checkpoint storage) at the same paths, i.e. on a shared filesystem;
- the rendezvous port reachable from every host: when the first host is this machine, its
  agent binds a free port itself and publishes it to the supervisor, which then starts the
  other agents with it (no port is picked, released and bound again); else
  ``$DET_LITE_RDZV_PORT``, default 29400.

Entries named ``localhost`` or ``127.0.0.1`` start their agent directly (no ssh), so a
multi-host rendezvous can be tried on one machine with ``["localhost:1", "localhost:1"]``.

Run as ``python -m determined_lite.launch._torchrun [--result PATH] [--failure-file PATH]
[--watch-stdin] [--listen-address ADDR] -- TORCHRUN-ARGS``, this module is one agent: torchrun itself, with
``--max-restarts 0`` so that the first worker that fails (an exception or a signal) stops the
others; it then prints one line naming that worker and, with ``--result``, writes it into the
trial's result file (``rank N: ExceptionType: message``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from determined_lite.config._plugins import ENGINES
from determined_lite.launch._engines import Engine, Rendezvous
from determined_lite.launch._exit import exit_now
from determined_lite.launch._failures import (
    WORKER_MODULE,
    primary_failure,
    signal_name,
    stopped_exit_code,
    write_failure_result,
)
from determined_lite.launch._hosts import (
    FORWARDED_ENV,
    FORWARDED_ENV_PREFIXES,
    LOOPBACK,
    SOCKET_IFNAME_ENV,
    is_local,
    listening_store,
    loopback_interface,
    parse_hosts,
)
from determined_lite.launch._slots import Slot, node_count
from determined_lite.runtime._failures import WorkerFailure, agent_failure_file, write_failure
from determined_lite.runtime._spec import WorkerSpec
from determined_lite.store._paths import restrict_umask

AGENT_MODULE = "determined_lite.launch._torchrun"
AGENT_NAME = "torchrun agent"  # names a failure of no worker: "torchrun agent on HOST: ..."
MULTINODE_MODULE = "determined_lite.launch._multinode"
DEFAULT_RDZV_PORT = 29400
ANY_ADDRESS = "0.0.0.0"  # a local first agent of remote hosts: its store listens everywhere
DEFAULT_STORE_TIMEOUT_S = 600  # torch's static rendezvous timeout when --rdzv-conf has none
MONITOR_INTERVAL_S = 0.1  # how often the agent checks its workers
SHUTDOWN_TIMEOUT_S = 5  # SIGTERM → SIGKILL for the surviving workers after a failure


# --- launcher side ------------------------------------------------------------------------


def _engine_env(spec: WorkerSpec, procs_per_host: int, local: bool) -> Dict[str, str]:
    """Environment for the agents and their workers (``local``: every host is this machine)."""
    from determined_lite.config import check_ddp_options
    from determined_lite.config._resources import DDP_OPTIONS_ENV

    env: Dict[str, str] = {}
    lo = loopback_interface() if local else None
    if lo is not None:
        env.update({name: lo for name in SOCKET_IFNAME_ENV if name not in os.environ})
    resources = spec.exp_conf.get("resources") or {}
    options = check_ddp_options(resources.get("ddp_options"))
    if options:
        env[DDP_OPTIONS_ENV] = json.dumps(options, sort_keys=True)
    if "OMP_NUM_THREADS" not in os.environ:
        # What torchrun would do (with a warning), but using the cores this host has.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // procs_per_host))
    return env


def _torchrun_args(nproc: int) -> List[str]:
    return [
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        str(MONITOR_INTERVAL_S),
        "--shutdown-timeout",
        str(SHUTDOWN_TIMEOUT_S),
    ]


def _static_rendezvous_args(
    nnodes: int, node_rank: int, master: str, port: int, timeout: int, local_addr: Optional[str]
) -> List[str]:
    """torchrun's static rendezvous: node ``node_rank`` of ``nnodes``, store at ``master:port``."""
    args = ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--rdzv-backend", "static"]
    args += ["--master-addr", master, "--master-port", str(port), "--rdzv-conf", f"timeout={timeout}"]
    return args + (["--local-addr", local_addr] if local_addr else [])


def agent_command(extra: Sequence[str], torchrun_args: Sequence[str], spec_path: str) -> List[str]:
    """The command line of one torchrun agent starting this trial's workers."""
    return (
        [sys.executable, "-u", "-m", AGENT_MODULE, *extra, "--"]
        + list(torchrun_args)
        + ["--module", WORKER_MODULE, spec_path]
    )


def problem(slots: int) -> Optional[str]:
    """torch.distributed comes with torch: any number of workers can start."""
    return None


def torchrun_command(
    spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
) -> Tuple[List[str], Dict[str, str]]:
    """``(argv, env)`` of the process that runs the trial's workers under torchrun."""
    from determined_lite._timeouts import dist_timeout

    spec_path = os.path.abspath(spec_path)
    join_timeout = int(max(dist_timeout(), 60.0))  # remote agents may take a while to start
    if not hosts:
        env = _engine_env(spec, spec.slots, local=True)
        # Port 0: the agent binds the rendezvous store to a free loopback port itself.
        args = _static_rendezvous_args(1, 0, LOOPBACK, 0, join_timeout, LOOPBACK)
        extra = ["--result", spec.result_path, "--listen-address", LOOPBACK]
        return agent_command(extra, args + _torchrun_args(spec.slots), spec_path), env

    parsed = parse_hosts(hosts, spec.slots, allow_repeats=True)
    local = all(is_local(h) for h, _ in parsed)
    env = _engine_env(spec, max(n for _, n in parsed), local=local)
    master = LOOPBACK if local else parsed[0][0]
    # Port 0: the first agent, on this machine, binds the store itself and publishes its port
    # (``--publish-fd``), which the supervisor gives the other agents (``_multinode``).
    publish = is_local(master)
    port = 0 if publish else int(os.environ.get("DET_LITE_RDZV_PORT", DEFAULT_RDZV_PORT))
    agents = []
    for i, (host, nproc) in enumerate(parsed):
        local_addr = LOOPBACK if local else None
        args = _static_rendezvous_args(len(parsed), i, master, port, join_timeout, local_addr)
        failure_file = agent_failure_file(spec.result_path, i)
        extra = ["--failure-file", failure_file, "--watch-stdin", "--node-label", host]
        if publish and i == 0:
            extra += ["--listen-address", LOOPBACK if local else ANY_ADDRESS]
        argv = agent_command(extra, args + _torchrun_args(nproc), spec_path)
        agents.append({"host": host, "local": is_local(host), "argv": argv})
    plan = {
        "publish": publish,
        "agents": agents,
        "result": spec.result_path,
        "failure_files": [agent_failure_file(spec.result_path, i) for i in range(len(parsed))],
        "cwd": spec.context_dir,
    }
    argv = [sys.executable, "-u", "-m", MULTINODE_MODULE, json.dumps(plan)]
    return argv, env


def publishing(argv: Sequence[str], fd: int) -> List[str]:
    """An agent's command line that writes its rendezvous port to ``fd`` once it listens."""
    cut = list(argv).index("--")
    return list(argv[:cut]) + ["--publish-fd", str(fd)] + list(argv[cut:])


def at_port(argv: Sequence[str], port: int) -> List[str]:
    """An agent's command line that meets at the rendezvous port ``port``."""
    out = list(argv)
    out[out.index("--master-port") + 1] = str(port)
    return out


def remote_command(host: str, argv: Sequence[str], cwd: str, env: Dict[str, str]) -> List[str]:
    """``ssh HOST 'cd CWD && env K=V ... ARGV'`` with the environment a worker needs."""
    ssh = shlex.split(os.environ.get("DET_LITE_SSH", "ssh")) + ["-o", "BatchMode=yes"]
    assignments = [
        f"{k}={v}"
        for k, v in sorted(env.items())
        if k in FORWARDED_ENV or k.startswith(FORWARDED_ENV_PREFIXES)
    ]
    line = f"cd {shlex.quote(cwd)} && exec env {' '.join(map(shlex.quote, assignments))} "
    line += " ".join(map(shlex.quote, argv))
    return ssh + [host, line]


# --- failures -----------------------------------------------------------------------------


def first_failure(failures: Sequence[WorkerFailure]) -> Optional[WorkerFailure]:
    """The failure that caused the others among those of torchrun's workers.

    torchrun stops the survivors with SIGTERM; failures carry torch's timestamps, so a worker
    that SIGTERM stopped ranks with those that exited, by time (see :func:`primary_failure`).
    """
    record = ENGINES["torch"]
    return primary_failure(failures, stop_signals=record.stop_signals, stopped_last=record.stopped_last)


def _failures_of(error: Any) -> List[WorkerFailure]:
    """The failures in torch's ``ChildFailedError``."""
    out = []
    for rank, f in error.failures.items():
        data = f.error_file_data or {}
        message = data.get("message") if isinstance(data, dict) else None
        text = message.get("message") if isinstance(message, dict) else message
        signame = None
        if f.exitcode is not None and f.exitcode < 0:
            signame = signal_name(-f.exitcode) or f"signal {-f.exitcode}"
        out.append(
            WorkerFailure(
                rank=int(rank),
                local_rank=int(f.local_rank),
                exit_code=f.exitcode,
                signal=signame,
                error=text if isinstance(text, str) and text and text != "<NONE>" else None,
                timestamp=f.timestamp,
            )
        )
    return out


# --- agent side ---------------------------------------------------------------------------


def _watch_stdin() -> None:
    """SIGTERM this agent (which stops its workers) when stdin closes: the supervisor or the
    ssh connection to it is gone."""

    def watch() -> None:
        try:
            while os.read(0, 4096):  # raw fd: no buffered-reader lock held at interpreter exit
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="det-lite-stdin-watch", daemon=True).start()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {AGENT_MODULE}", description="one torchrun agent")
    parser.add_argument("--result", help="the trial's result file; a failure is written into it")
    parser.add_argument("--failure-file", help="write the first failure of this agent's workers here (JSON)")
    parser.add_argument("--node-label", default="", help="name of this host in messages")
    parser.add_argument("--watch-stdin", action="store_true", help="stop when stdin closes")
    parser.add_argument(
        "--listen-address", help="host the rendezvous store (node rank 0) on this address only"
    )
    parser.add_argument("--publish-fd", type=int, help="write the rendezvous port to this fd once listening")
    parser.add_argument("torchrun_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    restrict_umask()  # an agent started over ssh does not inherit the launcher's umask
    rest = list(args.torchrun_args)
    if rest and rest[0] == "--":
        rest = rest[1:]

    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    # torchrun logs each failure and signal with pointers to its docs; the line printed below
    # says what happened once. Its loggers carry their own levels, so each is quieted.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(
            ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")
        ):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if args.watch_stdin:
        _watch_stdin()
    where = f" on {args.node_label}" if args.node_label else ""
    try:
        torchrun_args = torchrun.parse_args(rest)
        if args.listen_address and torchrun_args.node_rank == 0:
            # `store` stays referenced until main returns: torchrun's rendezvous shares its server.
            store, torchrun_args.master_port = _rendezvous_store(args.listen_address, torchrun_args)
            if args.publish_fd is not None:
                with os.fdopen(args.publish_fd, "w") as published:
                    published.write(f"{torchrun_args.master_port}\n")
        torchrun.run(torchrun_args)
    except ChildFailedError as e:
        failure = first_failure(_failures_of(e))
        assert failure is not None
        _report(args, failure)
        sys.stderr.write(failure.summary(where) + "\n")
        return 1
    except SignalException as e:
        # Asked to stop (the launcher stopping the trial): torchrun already stopped the workers.
        sys.stderr.write(f"det-lite: {AGENT_NAME}{where} stopped by {signal.Signals(e.sigval).name}\n")
        return stopped_exit_code(e.sigval)
    except Exception as e:  # noqa: BLE001 -- rendezvous or launch errors: one clear line
        error = f"{type(e).__name__}: {e}"
        _report(args, WorkerFailure(rank=None, node=args.node_label or "this host", error=error))
        sys.stderr.write(f"det-lite: {AGENT_NAME}{where} failed: {error}\n")
        return 1
    return 0


def _rendezvous_store(address: str, torchrun_args: argparse.Namespace) -> Tuple[Any, int]:
    """A TCPStore server listening on ``address`` only, at ``--master-port`` (0: a free port),
    which torchrun's static rendezvous then finds and shares with the workers (``multi_tenant``).
    Returns ``(store, port)``."""
    return listening_store(address, int(torchrun_args.master_port or 0), _rdzv_timeout(torchrun_args))


def _rdzv_timeout(torchrun_args: argparse.Namespace) -> float:
    """``timeout=S`` of ``--rdzv-conf`` (torch's own default when absent)."""
    for item in str(getattr(torchrun_args, "rdzv_conf", "") or "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "timeout" and value.strip():
            return float(value)
    return float(DEFAULT_STORE_TIMEOUT_S)


def _report(args: argparse.Namespace, failure: WorkerFailure) -> None:
    if failure.node is None:
        failure.node = args.node_label
    if failure.timestamp is None:
        failure.timestamp = time.time()
    if args.failure_file:
        write_failure(args.failure_file, failure)
    if args.result:
        write_failure_result(args.result, failure.describe(AGENT_NAME))


if __name__ == "__main__":
    exit_now(main())  # skips the slow teardown of torch and Gloo (see _exit.py)


command = torchrun_command  # the engine record's launcher command (launch/_engines.py)


# --- the engine's plug-in (launch/_engines.py) ---------------------------------------------


class StoreRendezvous(Rendezvous):
    """torch's rendezvous ``TCPStore``, hosted by rank 0's slot process as torchrun's agent
    hosts it: bound by that process to a free port of ``address`` only, and kept open while it
    lives; every worker joins it as a client (``TORCHELASTIC_USE_AGENT_STORE``), so no port is
    picked, released and bound again."""

    def __init__(self, address: str) -> None:
        from determined_lite._timeouts import dist_timeout

        self.address = address
        self._store, self._port = listening_store(address, 0, max(dist_timeout(), 60.0))

    def env(self) -> Dict[str, str]:
        return {
            "MASTER_ADDR": self.address,
            "MASTER_PORT": str(self._port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }

    def port(self) -> Optional[int]:
        return self._port

    def close(self) -> None:
        self._store = None  # the server stops with its last reference


def rank_env(slots: Sequence[Slot], rank: int) -> Dict[str, str]:
    """torchrun's environment for ``rank`` (but the rendezvous')."""
    me = slots[rank]
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(len(slots)),
        "LOCAL_RANK": str(me.local_rank),
        "LOCAL_WORLD_SIZE": str(me.local_size),
        "GROUP_RANK": str(me.node_index),
        "GROUP_WORLD_SIZE": str(node_count(slots)),
    }


class TorchEngine(Engine):
    """torch.distributed: torchrun locally; elsewhere torchrun's environment and a store hosted
    by rank 0's slot."""

    interface_env = SOCKET_IFNAME_ENV

    def problem(self, slots: int) -> Optional[str]:
        return problem(slots)

    def command(
        self, spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
    ) -> Tuple[List[str], Dict[str, str]]:
        return torchrun_command(spec, spec_path, hosts)

    def rendezvous(self, address: str, slots: Sequence[Slot]) -> Rendezvous:
        return StoreRendezvous(address)

    def rank_env(
        self, spec: WorkerSpec, slots: Sequence[Slot], rank: int, meet: Mapping[str, str]
    ) -> Dict[str, str]:
        from determined_lite.config import check_ddp_options
        from determined_lite.config._resources import DDP_OPTIONS_ENV

        env = dict(rank_env(slots, rank), **meet)
        options = check_ddp_options((spec.exp_conf.get("resources") or {}).get("ddp_options"))
        if options:
            env[DDP_OPTIONS_ENV] = json.dumps(options, sort_keys=True)
        return env


ENGINE = TorchEngine()
