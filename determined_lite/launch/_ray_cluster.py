"""The driver's side of a Ray cluster: connecting and the storage probe.

``resources.ray`` (``config/_ray.py``) says where the cluster is (``address``, else
``$RAY_ADDRESS``, else Ray's ``auto``), how a trial's slots are placed (``pack``: one node when
it fits, as Determined's scheduler does; ``spread``) and what one slot holds
(``resources_per_slot``, ``{CPU: 1}`` by default). Everything Ray-specific that is not the run of
one trial (``_ray.py``) lives here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import signal
import socket
import threading
from typing import Any, Dict, List, Mapping, Optional

from determined_lite.store._paths import checkpoint_root, make_private_dirs

PROBE_TIMEOUT_S = 60.0
REACH_TIMEOUT_S = 5.0
PLACEMENT_TIMEOUT_S = 600.0  # resources.ray.placement_timeout's default: an autoscaler's new node
RAY_CLIENT_PORT = 10001  # a ray:// address without a port: Ray Client's default


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """``resources.ray`` of a validated config (defaults when absent)."""

    address: Optional[str] = None
    placement: str = "pack"
    resources_per_slot: Mapping[str, float] = dataclasses.field(default_factory=lambda: {"CPU": 1.0})
    placement_timeout: float = PLACEMENT_TIMEOUT_S

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "RayOptions":
        section = dict((config.get("resources") or {}).get("ray") or {})
        per_slot = section.get("resources_per_slot") or {"CPU": 1.0}
        return cls(
            address=section.get("address"),
            placement=str(section.get("placement") or "pack"),
            resources_per_slot={str(k): float(v) for k, v in per_slot.items()},
            placement_timeout=float(section.get("placement_timeout") or PLACEMENT_TIMEOUT_S),
        )

    def actor_options(self) -> Dict[str, Any]:
        """``ray.remote`` options that make a slot's actor hold its whole bundle."""
        rest = {k: v for k, v in self.resources_per_slot.items() if k not in ("CPU", "GPU")}
        options: Dict[str, Any] = {
            "num_cpus": self.resources_per_slot.get("CPU", 0.0),
            "num_gpus": self.resources_per_slot.get("GPU", 0.0),
            "max_concurrency": 4,  # take() waits while stop() / request_stop() may come
        }
        if rest:
            options["resources"] = rest
        return options


def connect(options: RayOptions) -> None:
    """Join the Ray cluster (once per process): ``resources.ray.address``, ``$RAY_ADDRESS`` or
    ``auto``. Ray's log lines stay in Ray's log files; the process keeps its SIGTERM handler."""
    import ray

    if ray.is_initialized():
        return
    address = options.address or os.environ.get("RAY_ADDRESS") or "auto"
    _check_reachable(address)
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if main else None
    ray.init(
        address=address,
        logging_level=logging.WARNING,
        log_to_driver=False,
        configure_logging=False,
    )
    if main:  # ray.init makes SIGTERM exit at once: the runner's own handler pauses instead
        signal.signal(signal.SIGTERM, handler)


def _check_reachable(address: str) -> None:
    """A ``HOST:PORT`` or ``ray://HOST[:PORT]`` (Ray Client, port 10001 by default) where nothing
    listens is a ConnectionError within seconds (Ray itself retries for half a minute or more)."""
    scheme, _, rest = address.rpartition("://")
    if scheme == "ray" and rest and ":" not in rest:
        rest += f":{RAY_CLIENT_PORT}"
    host, _, port = rest.rpartition(":")
    if scheme not in ("", "ray") or not host or not port.isdigit():
        return  # auto, local, another scheme: Ray's own answer
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as e:
        raise ConnectionError(f"nothing answers at {address} ({e.strerror or e})") from None


def alive_nodes() -> List[Dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def cluster_problem(options: RayOptions, config: Mapping[str, Any]) -> Optional[str]:
    """What keeps a trial from running on the cluster (None when nothing): no cluster, or a node
    that cannot reach the checkpoint storage. A gang larger than the cluster now is not refused:
    it waits for an autoscaler's nodes (``_ray_place.py``)."""
    try:
        connect(options)
    except ImportError:
        return "resources.executor: ray needs Ray: pip install 'determined-lite[ray]'"
    except Exception as e:  # noqa: BLE001 -- Ray's own errors vary; one line says it
        return f"resources.executor: ray: cannot connect to a Ray cluster: {connect_failure(e)}"
    return storage_problem(config)


def cluster_slots(options: RayOptions) -> int:
    """How many slots of ``resources_per_slot`` the alive nodes hold in all."""
    return sum(slots_in(node.get("Resources") or {}, options.resources_per_slot) for node in alive_nodes())


def slots_in(have: Mapping[str, float], per_slot: Mapping[str, float]) -> int:
    """How many slots of ``per_slot`` the resources ``have`` hold."""
    counts = [int(float(have.get(k, 0.0)) // v) for k, v in per_slot.items() if v > 0]
    return min(counts) if counts else 0


def storage_problem(config: Mapping[str, Any]) -> Optional[str]:
    """Whether every alive node reaches the checkpoint storage as a run needs it: each node's
    det-lite actor (``_ray_node.py``, warm from an earlier experiment or started now) writes,
    reads back and deletes a key in a cloud storage, or reads back a file with a random token
    that the driver wrote into a file system's checkpoint root. Nothing else of the driver's (its
    home, the experiment's directory) needs to be on a node."""
    import ray

    from determined_lite.launch._ray_node import node_pool
    from determined_lite.storage import CLOUD_TYPES

    files: Dict[str, str] = {}
    try:
        if (config.get("checkpoint_storage") or {}).get("type") not in CLOUD_TYPES:
            directory = make_private_dirs(checkpoint_root(config))
            path = os.path.join(directory, f".det-lite-probe-{secrets.token_hex(8)}")
            files[path] = secrets.token_hex(16)
            with open(path, "w") as f:
                f.write(files[path])
        pool, nodes, refs = node_pool(), alive_nodes(), []
        for node in nodes:
            try:
                refs.append(pool.actor(node["NodeID"]).probe.remote(dict(config), files))
            except Exception as e:  # noqa: BLE001 -- Ray's errors vary: one line names the node
                where = f"{node['NodeManagerAddress']} (node id {node['NodeID'][:12]})"
                return f"Ray node {where} did not start det-lite's node actor: {connect_failure(e)}"
        for node, seen in zip(nodes, ray.get(refs, timeout=PROBE_TIMEOUT_S)):
            if seen["problem"]:
                where = f"{node['NodeManagerAddress']} ({seen['host']}, node id {node['NodeID'][:12]})"
                return f"Ray node {where} {seen['problem']}"
    finally:
        for path in files:
            try:
                os.unlink(path)
            except OSError:
                pass
    return None


def connect_failure(error: BaseException) -> str:
    """Why :func:`connect` failed, in one line. Ray Client's "Initialization failure from
    server:" carries the server's traceback after it: its last line (the exception) says why."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[-1]}"
    return lines[0]
