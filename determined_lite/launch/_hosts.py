"""``resources.hosts``: where a trial's workers run, as ``["host-a:2", "host-b:2"]``.

Listeners: when every worker runs on this machine (``resources.hosts`` unset, or naming only
:data:`LOCAL_HOSTS`), every service det-lite starts for a trial listens on the loopback address
:data:`LOOPBACK` only (the engines' rendezvous stores and servers, and the workers' Gloo/NCCL
sockets on the loopback interface), never on every interface.
"""

from __future__ import annotations

import re
import socket
from typing import Any, List, Optional, Sequence, Tuple

import psutil

_HOSTNAME = re.compile(r"^[\w.-]+$")  # names and addresses both launchers accept
# Names of this machine that need no ssh (a launcher starts their workers directly).
LOCAL_HOSTS = ("localhost", "127.0.0.1")
LOOPBACK = "127.0.0.1"  # the address single-host trials' services listen on
# Worker environment naming the interface Gloo and NCCL bind to (horovodrun sets its own).
SOCKET_IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
# Environment a worker on another host needs from this one (ssh, a Ray node's actor: neither
# carries this process's environment).
FORWARDED_ENV_PREFIXES = ("DET_LITE_", "TORCH_", "NCCL_", "GLOO_", "OMP_", "MKL_", "CUDA_VISIBLE_DEVICES")
FORWARDED_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "LOGLEVEL")


def loopback_interface() -> Optional[str]:
    """The interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS), when it can be found."""
    return interface_of(LOOPBACK)


def interface_of(address: str) -> Optional[str]:
    """The name of this machine's interface that holds ``address``, when one does."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)):
            return name
    return None


def is_local(host: str) -> bool:
    """Whether ``host`` is one of :data:`LOCAL_HOSTS`."""
    return host in LOCAL_HOSTS


def parse_hosts(hosts: Sequence[str], slots: int, allow_repeats: bool = False) -> List[Tuple[str, int]]:
    """``["host-a:2", "host-b:2"]`` → ``[("host-a", 2), ("host-b", 2)]``; counts must sum to ``slots``.

    ``allow_repeats``: a host may appear twice (torchrun agents: one per entry, which lets a
    multi-host rendezvous run on one machine); horovodrun's ``-H`` wants each host once.
    """
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise ValueError(f"resources.hosts must be a non-empty list of 'host:slots' strings, got {hosts!r}")
    parsed: List[Tuple[str, int]] = []
    for i, entry in enumerate(hosts):
        name, sep, count = str(entry).strip().rpartition(":")
        if not sep or not _HOSTNAME.match(name) or not count.isdigit() or int(count) < 1:
            raise ValueError(
                f"resources.hosts[{i}]: entry {entry!r} must look like 'host:slots' (a host name of "
                "letters, digits, '.', '-', '_' and a positive slot count), e.g. 'host-a:2'"
            )
        if not allow_repeats and any(name == other for other, _ in parsed):
            raise ValueError(f"resources.hosts lists host {name!r} twice; give each host once with its slots")
        parsed.append((name, int(count)))
    total = sum(n for _, n in parsed)
    if total != slots:
        raise ValueError(
            f"resources.hosts {list(hosts)} has {total} slots in all but resources.slots_per_trial "
            f"is {slots}; the slot counts must add up to slots_per_trial"
        )
    return parsed


def listening_store(address: str, port: int, timeout_s: float) -> Tuple[Any, int]:
    """A torch ``TCPStore`` server listening on ``address`` only, at ``port`` (0: a free port).

    torch's TCPStore server binds every interface whatever host it is given; one created on a
    socket of our own (``master_listen_fd``) listens where that socket does. Returns
    ``(store, port)``.
    """
    import datetime

    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(socket.SOMAXCONN)
        port = int(sock.getsockname()[1])
    except BaseException:
        sock.close()
        raise
    store = dist.TCPStore(
        address,
        port,
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        master_listen_fd=sock.detach(),  # the server owns the socket from now on
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return store, port
