"""Start a trial's workers with ``horovodrun``: N slots on this host or on ``resources.hosts``.

One slot per worker process. On this host (the default) the command is, in effect::

    horovodrun -np N -H localhost:N --gloo --network-interfaces lo \\
        --start-timeout 30 --gloo-timeout-seconds 30 \\
        python -u -m determined_lite.launch.worker SPEC.json

Listeners: on this host, every service listens on 127.0.0.1 only: the workers' Gloo sockets and
the rendezvous address through ``--network-interfaces lo`` (``HOROVOD_GLOO_IFACE``), and
horovodrun's own rendezvous server, which Horovod binds to every interface, through the
wrapper's ``--listen-address 127.0.0.1`` (:func:`bind_services_to`).

Controller: Gloo (CPU collectives; Horovod runs NCCL for CUDA tensors when it was built with
it). ``DET_LITE_HOROVOD_CONTROLLER=mpi`` picks ``mpirun`` instead, when Horovod was built with
MPI.

Several hosts: ``resources.hosts: ["host-a:2", "host-b:2"]`` becomes ``-H host-a:2,host-b:2``
(ranks 0-1 on host-a, 2-3 on host-b); the slot counts must add up to
``resources.slots_per_trial``. ``horovodrun`` reaches the other hosts over ``ssh`` without a
password and runs the worker there with the same Python executable, from the same directory:
every host needs det-lite, torch and the same Horovod build at the same paths, and the context
directory, ``$DET_LITE_HOME`` (spec, result, store, checkpoints) must be on a filesystem
shared at the same path.

Timeouts: ``--start-timeout`` bounds horovodrun's own start (ssh checks, interface discovery)
and ``--gloo-timeout-seconds`` (``HOROVOD_GLOO_TIMEOUT_SECONDS``) the workers' rendezvous and
each Gloo operation; both default to ``DET_LITE_DIST_TIMEOUT`` (30 s).

The command runs horovodrun through :func:`main` (``python -m determined_lite.launch._horovodrun
--result RESULT.json -- HOROVODRUN-ARGS``), in the same process, for two reasons:

- output: horovodrun tags each worker line ``[1]<stdout>:``, and the worker already prefixes
  its lines with ``[rank 1] ``; the wrapper drops horovodrun's tags.
- failures: when a worker fails, horovodrun stops the others (SIGTERM, SIGKILL after 5 s) and
  raises a traceback of its own. The wrapper prints one line instead, naming the worker that
  failed first and its error (workers record it on the way out, see
  ``HorovodContext.abort``), and writes it into the trial's result file.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import socket
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from determined_lite.config._plugins import ENGINES
from determined_lite.launch._engines import Engine, Rendezvous
from determined_lite.launch._failures import (
    primary_failure,
    signal_name,
    stopped_exit_code,
    worker_command,
    write_failure_result,
)
from determined_lite.launch._hosts import LOOPBACK, is_local, loopback_interface, parse_hosts
from determined_lite.launch._slots import Slot
from determined_lite.runtime._failures import (
    FAILURE_PREFIX_ENV,
    WorkerFailure,
    read_worker_failures,
    remove_worker_failures,
    worker_failure_prefix,
)
from determined_lite.runtime._spec import WorkerSpec
from determined_lite.store._paths import restrict_umask

WRAPPER_MODULE = "determined_lite.launch._horovodrun"
CONTROLLER_ENV = "DET_LITE_HOROVOD_CONTROLLER"
CONTROLLERS = ("gloo", "mpi")


def _is_local(host: str) -> bool:
    return is_local(host) or host in {socket.gethostname(), socket.getfqdn()}


def bind_services_to(address: str) -> None:
    """Make horovodrun's own servers (the Gloo rendezvous HTTP server, the driver and task
    services) listen on ``address`` only: Horovod binds them to every interface and has no
    option for it, so its port search is wrapped to bind the given address instead."""
    from horovod.runner.common.util import network as services
    from horovod.runner.http import http_server

    search = http_server.find_port

    def find_port(server_factory: Callable[[Tuple[str, int]], Any]) -> Any:
        return search(lambda addr: server_factory((address, addr[1])))

    http_server.find_port = find_port
    services.find_port = find_port


def _controller() -> str:
    controller = os.environ.get(CONTROLLER_ENV, "gloo").strip().lower()
    if controller not in CONTROLLERS:
        raise ValueError(f"{CONTROLLER_ENV} must be one of {CONTROLLERS}, got {controller!r}")
    if controller == "mpi":
        from horovod.common.util import mpi_built

        if not mpi_built():
            raise ValueError(
                f"{CONTROLLER_ENV}=mpi but the installed Horovod was built without MPI; rebuild it "
                "with HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MPI=0 scripts/install-horovod.sh, or use gloo"
            )
    return controller


def timeout_seconds() -> int:
    """Seconds for horovodrun's start and for each Gloo rendezvous/operation."""
    from determined_lite._timeouts import dist_timeout

    return max(1, math.ceil(dist_timeout()))


HOROVOD_MISSING = (
    "resources.distributed_backend is 'horovod' but Horovod is not installed; install it "
    "with scripts/install-horovod.sh or set resources.distributed_backend: torch"
)
_RECORD = ENGINES["horovod"]


def horovod_installed() -> bool:
    """Whether Horovod can be imported, looked up without importing it (that costs ~1 s)."""
    return importlib.util.find_spec("horovod") is not None


def problem(slots: int) -> Optional[str]:
    """Why ``slots`` (> 1) Horovod workers cannot start here: Horovod is not installed."""
    return None if horovod_installed() else HOROVOD_MISSING


def horovodrun_command(
    spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
) -> Tuple[List[str], Dict[str, str]]:
    """The command line (and extra environment) that starts ``spec.slots`` workers via horovodrun."""
    missing = problem(spec.slots)
    if missing:
        raise ValueError(missing)

    placed = parse_hosts(hosts, spec.slots) if hosts else [("localhost", spec.slots)]
    all_local = all(_is_local(h) for h, _ in placed)
    timeout = timeout_seconds()
    lo = loopback_interface() if all_local else None
    argv = [sys.executable, "-u", "-m", WRAPPER_MODULE, "--result", spec.result_path]
    argv += ["--listen-address", LOOPBACK] if lo is not None else []
    argv += ["--", "-np", str(spec.slots), "-H", ",".join(f"{h}:{n}" for h, n in placed)]
    argv += [f"--{_controller()}", "--start-timeout", str(timeout), "--gloo-timeout-seconds", str(timeout)]
    if all_local:
        if lo is not None:
            argv += ["--network-interfaces", lo]  # workers' Gloo sockets, rendezvous address
        argv.append("--disable-cache")  # the cache only remembers ssh checks of remote hosts
    argv += worker_command(spec_path)
    env = {"HOROVOD_GLOO_TIMEOUT_SECONDS": str(timeout), "PYTHONUNBUFFERED": "1"}
    return argv, env


# --- the horovodrun wrapper ---------------------------------------------------------------------

# horovodrun's per-line tag: "[1]<stdout>:" (Gloo: the rank), "[1,0]<stderr>:" (mpirun
# --tag-output: job, rank), optionally after a timestamp.
_TAG = re.compile(
    r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
    r"\[(?:\d+,)?(?P<rank>\d+)\]<std(?:out|err)>:"
)
# horovodrun's own lines about exits, said once by the wrapper's summary instead.
_EXIT_LINE = re.compile(r"^Process (?P<rank>\d+) exit with status code (?P<code>-?\d+)\.\s*$")
_TERMINATING_LINE = re.compile(r"^Terminating remaining workers after failure of Process \d+\.\s*$")
_FIRST_EXIT = re.compile(r"Process name: (\S+)\s+Exit code: (-?\d+)")


class _UntaggedStream:
    """Text stream for horovodrun's output: worker lines (one per write) lose horovodrun's tag
    and keep (or, for lines written before the worker set it up, get) the worker's own
    ``[rank N] `` prefix; horovodrun's own lines about failed workers are kept in ``exits``
    instead of printed."""

    def __init__(self, stream: TextIO, prefix_ranks: bool = True) -> None:
        self._stream = stream
        self._prefix_ranks = prefix_ranks
        self._pending = ""  # horovodrun's own text since its last newline (print writes in pieces)
        self.exits: List[Tuple[str, int]] = []  # (rank, status) of workers that failed, in order
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            tag = _TAG.match(text)
            if tag is not None:
                body = text[tag.end() :]
                prefix = f"[rank {tag.group('rank')}] "
                if self._prefix_ranks and body.strip() and not body.startswith(prefix):
                    body = prefix + body
                self._stream.write(body)
                return len(text)
            self._pending += text
            while "\n" in self._pending:
                line, _, self._pending = self._pending.partition("\n")
                exit_line = _EXIT_LINE.match(line)
                if exit_line is not None:
                    self.exits.append((exit_line.group("rank"), int(exit_line.group("code"))))
                elif not _TERMINATING_LINE.match(line):
                    self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._stream.write(self._pending)
                self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, ...
        return getattr(self._stream, name)


def _exit_signal(code: int) -> Optional[str]:
    """The signal that ended a worker horovodrun reports with exit status ``code``: ``128 + N``
    (a shell's convention) or ``-N``."""
    if 0 <= code <= 128:
        return None
    return signal_name(code - 128 if code > 128 else -code)


def _exit_failures(exits: Sequence[Tuple[str, int]], horovodrun_error: str) -> List[WorkerFailure]:
    """The workers horovodrun saw fail (``exits``, else the first one its error names), timed by
    the order in which it saw them."""
    if not exits:
        match = _FIRST_EXIT.search(horovodrun_error)
        exits = [(match.group(1), int(match.group(2)))] if match else []
    return [
        WorkerFailure(rank=rank, exit_code=code, signal=_exit_signal(code), timestamp=float(i))
        for i, (rank, code) in enumerate(exits)
    ]


def first_failure(
    records: Sequence[WorkerFailure], exits: Sequence[Tuple[str, int]], horovodrun_error: str
) -> Optional[WorkerFailure]:
    """The worker failure that caused the others; None when no worker failed (horovodrun did).

    An error a worker recorded (workers that failed only because a peer did record nothing);
    else the exits horovodrun reported, where the SIGTERM it sends while stopping the others,
    and a SIGINT, come after any other end (see :func:`primary_failure`).
    """
    signals, last = _RECORD.stop_signals, _RECORD.stopped_last
    return primary_failure(records, stop_signals=signals, stopped_last=last) or primary_failure(
        _exit_failures(exits, horovodrun_error), stop_signals=signals, stopped_last=last
    )


def _num_proc(args: Sequence[str]) -> Optional[int]:
    for flag in ("-np", "--num-proc"):
        if flag in args[:-1]:
            value = args[args.index(flag) + 1]
            return int(value) if value.isdigit() else None
    return None


def _parse_args(args: List[str]) -> Tuple[Optional[str], Optional[str], List[str]]:
    """(``--result``, ``--listen-address``, horovodrun's arguments) of the wrapper's command line."""
    result_path = listen_address = None
    while args[:1] in (["--result"], ["--listen-address"]) and len(args) > 1:
        if args[0] == "--result":
            result_path = args[1]
        else:
            listen_address = args[1]
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    return result_path, listen_address, args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m determined_lite.launch._horovodrun [--result PATH] [--listen-address ADDR] --
    HOROVODRUN-ARGS``.

    Runs horovodrun in this process with untagged output; with ``--listen-address``, its servers
    listen on that address only (:func:`bind_services_to`). When a worker fails, prints one
    line naming the worker that failed first and, with ``--result``, writes it into the
    trial's result file (likewise when horovodrun itself fails, e.g. a start timeout).
    Exit status: 0 when every worker succeeded, 128 + N when stopped by signal N (SIGTERM,
    SIGINT), else 1.
    """
    restrict_umask()
    result_path, listen_address, args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    if listen_address:
        bind_services_to(listen_address)
    prefix = worker_failure_prefix(result_path) if result_path else None
    if prefix:
        remove_worker_failures(prefix)
        os.environ[FAILURE_PREFIX_ENV] = prefix

    from horovod.runner import launch as hvd_launch

    several = _num_proc(args) != 1
    out = _UntaggedStream(sys.stdout, prefix_ranks=several)
    sys.stdout = out
    sys.stderr = _UntaggedStream(sys.stderr, prefix_ranks=several)
    sys.argv = ["horovodrun", *args]
    try:
        hvd_launch.run_commandline()
        return 0
    except Exception as e:  # noqa: BLE001 -- a worker or horovodrun itself failed: one line each
        sys.stdout.flush()
        records = read_worker_failures(prefix) if prefix else []
        failure = first_failure(records, out.exits, str(e))
        if failure is None:
            # Not a worker's failure: horovodrun could not start or run them (ssh, timeouts, ...).
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            error = f"horovodrun: {type(e).__name__}: {first}"
            print(f"det-lite: {error}", file=sys.stderr)
        elif not failure.error and failure.signal in _RECORD.stop_signals:
            # Asked to stop (the launcher's SIGTERM): horovodrun passed it on to every worker.
            print(f"det-lite: workers stopped by {failure.signal}", file=sys.stderr)
            return stopped_exit_code(signal.Signals[failure.signal])
        else:
            error = failure.describe()
            print(failure.summary(), file=sys.stderr)
        if result_path:
            write_failure_result(result_path, error)
        return 1
    finally:
        if prefix:
            remove_worker_failures(prefix)


if __name__ == "__main__":
    sys.exit(main())


command = horovodrun_command  # the engine record's launcher command (launch/_engines.py)


# --- the engine's plug-in (launch/_engines.py) ---------------------------------------------


class GlooRendezvous(Rendezvous):
    """Horovod's Gloo rendezvous server (what horovodrun starts), hosted by rank 0's slot
    process on its node: it binds ``address`` (only) and a free port itself, and serves the
    gang's host assignments (host names are the trial's node labels ``node<i>``)."""

    def __init__(self, address: str, slots: Sequence[Slot]) -> None:
        from horovod.runner.common.util import hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        self.address = address
        self._server = RendezvousHTTPServer((address, 0), RendezvousHandler, 0)
        self._port = int(self._server.server_address[1])
        counts: Dict[int, int] = {}
        for s in slots:
            counts[s.node_index] = counts.get(s.node_index, 0) + 1
        plan = ",".join(f"node{i}:{n}" for i, n in sorted(counts.items()))
        self._server.init(hosts.get_host_assignments(hosts.parse_hosts(plan), len(slots)))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gloo-rendezvous", daemon=True
        )
        self._thread.start()

    def env(self) -> Dict[str, str]:
        return {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": self.address,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self._port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
        }

    def port(self) -> Optional[int]:
        return self._port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def rank_env(slots: Sequence[Slot], rank: int) -> Dict[str, str]:
    """horovodrun's per-rank environment (host names are the trial's node labels)."""
    me = slots[rank]
    peers = [s for s in slots if s.local_rank == me.local_rank]  # one per node, in node order
    return {
        "HOROVOD_HOSTNAME": f"node{me.node_index}",
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(len(slots)),
        "HOROVOD_LOCAL_RANK": str(me.local_rank),
        "HOROVOD_LOCAL_SIZE": str(me.local_size),
        "HOROVOD_CROSS_RANK": str(peers.index(me)),
        "HOROVOD_CROSS_SIZE": str(len(peers)),
    }


class HorovodEngine(Engine):
    """Horovod: horovodrun locally; elsewhere horovodrun's environment and a Gloo rendezvous
    server hosted by rank 0's slot."""

    interface_env = ("HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME")

    def problem(self, slots: int) -> Optional[str]:
        return problem(slots)

    def command(
        self, spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
    ) -> Tuple[List[str], Dict[str, str]]:
        return horovodrun_command(spec, spec_path, hosts)

    def rendezvous(self, address: str, slots: Sequence[Slot]) -> Rendezvous:
        return GlooRendezvous(address, slots)

    def rank_env(
        self, spec: WorkerSpec, slots: Sequence[Slot], rank: int, meet: Mapping[str, str]
    ) -> Dict[str, str]:
        env = {"HOROVOD_GLOO_TIMEOUT_SECONDS": str(timeout_seconds())}
        env.update(rank_env(slots, rank))
        env.update(meet)
        return env


ENGINE = HorovodEngine()
