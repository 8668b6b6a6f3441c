"""A node's actor for one experiment on Ray: 1-slot runs start on a warm fork server, as locally.

A 1-slot CPU run on Ray needs no actor of its own: its placement group's one bundle holds the
slot (Ray's accounting, an autoscaler's demand), and the actor of its node (:class:`NodeWorker`,
one per node and experiment, started when the executor prestarts or the node's first such run
is placed, ended when the executor closes) starts its worker through det-lite's fork server on
that node (``_forkserver.py``), with everything else a slot's actor does (``_ray_slot.py``: the
worker's output, reports, answers, stop flag and files) kept per run. A fresh actor per run
cost a Ray worker process (1.5-2.5 s) and a fresh worker importing torch (4-10 s on a busy box).

The node's server is the one of this installation *and* image on the node (its socket is named
by both: :func:`server_key`): the image is the trial's environment as a slot's worker gets it
(the node's, without Ray's own variables: ``_ray_slot.node_environ``, the same for every run of the
node), so it neither takes over nor is taken over by a local runner's server on the same
machine (whose environment differs). A worker whose environment differs from the server's
image, or one with GPUs, starts as a plain process (the fork server's rule): never a silent
difference. The server is the node actor's child, and Ray ends an actor's children with it: it
lives as long as the experiment's node actor.

Gangs (2 or more slots) and GPU slots keep their per-rank slot actors (``_ray.py``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any, Dict, List, Optional

from determined_lite.launch._forkserver import ForkServer, enabled, image_digest
from determined_lite.launch._ray_slot import SlotWorker
from determined_lite.launch._server_registry import server_key as installation_key

NODE_CONCURRENCY = 64  # a thread per waiting call: each run's take(), stop() and answer()
CLOSE_WAIT_S = 10.0
# SlotWorker's methods the driver calls on a slot, here with the run's key first.
SLOT_METHODS = tuple("node host_rendezvous rendezvous_port start take answer request_stop stop".split())


def server_key(env: Dict[str, str]) -> str:
    """The socket name of the node's fork server for workers with ``env``: the installation's
    key and the image's digest."""
    return hashlib.sha256(f"{installation_key()}-{image_digest(env)}".encode()).hexdigest()[:24]


class NodeWorker:
    """On one node for one experiment: the node's fork server and the 1-slot runs placed there,
    each a :class:`SlotWorker` (without an actor of its own) named by its run's key."""

    def __init__(self) -> None:
        os.umask(0o077)  # a forked worker gets the umask of the process that asks for it
        self._slots: Dict[str, SlotWorker] = {}
        self._servers: Dict[str, Optional[ForkServer]] = {}
        self._lock = threading.Lock()

    def _server(self, env: Dict[str, str]) -> Optional[ForkServer]:
        """The fork server for workers with ``env``, connected to (or started) on first use;
        None when forks are off or it cannot start (the worker then starts plainly)."""
        if not enabled(env):
            return None
        key = server_key(env)
        with self._lock:
            server = self._servers.get(key)
            if server is None or server.lost:
                try:
                    server = ForkServer(env, key=key)
                except OSError:
                    server = None
                self._servers[key] = server
            return server

    def _slot(self, run: str) -> SlotWorker:
        with self._lock:
            return self._slots[run]

    def node(self, run: str) -> Dict[str, Any]:
        """Open the slot of ``run``; where it is (``SlotWorker.node``)."""
        slot = SlotWorker(self._server)
        with self._lock:
            self._slots[run] = slot
        return slot.node()

    def host_rendezvous(self, run: str, backend: str, slots: List[Dict[str, Any]]) -> Dict[str, str]:
        return self._slot(run).host_rendezvous(backend, slots)

    def rendezvous_port(self, run: str) -> Optional[int]:
        return self._slot(run).rendezvous_port()

    def start(self, run: str, *args: Any) -> int:
        return self._slot(run).start(*args)

    def take(self, run: str, timeout: float) -> Dict[str, Any]:
        return self._slot(run).take(timeout)

    def answer(self, run: str, line: str) -> None:
        self._slot(run).answer(line)

    def request_stop(self, run: str) -> None:
        self._slot(run).request_stop()

    def stop(self, run: str, grace: float) -> None:
        self._slot(run).stop(grace)

    def release(self, run: str) -> None:
        """The run ended: its slot closed (``SlotWorker.close``)."""
        with self._lock:
            slot = self._slots.pop(run, None)
        if slot is not None:
            slot.close()

    def close(self) -> None:
        """The experiment's executor closes: every slot closed, the servers left (each ends once
        idle, as a local runner's does)."""
        for run in list(self._slots):
            self.release(run)
        for server in self._servers.values():
            if server is not None:
                server.close()
        self._servers.clear()


class _Bound:
    """``actor.method`` with the run's key as its first argument (``.remote(...)``)."""

    def __init__(self, method: Any, run: str) -> None:
        self._method, self._run = method, run

    def remote(self, *args: Any) -> Any:
        return self._method.remote(self._run, *args)


class NodeSlot:
    """A 1-slot run's slot on its node's actor, used as a slot's own actor is
    (``slot.take.remote(timeout)``); :meth:`release` ends it."""

    def __init__(self, node: Any, run: str) -> None:
        self._node, self.run = node, run
        for name in SLOT_METHODS:
            setattr(self, name, _Bound(getattr(node, name), run))

    def release(self) -> None:
        self._node.release.remote(self.run)


class NodePool:
    """The driver's node actors for one experiment: one per node, started lazily (one pool per
    process, as its Ray connection is: ``experiment create`` prestarts them with the executor it
    checks the config with, and its runner's executor uses them: :func:`node_pool`)."""

    def __init__(self) -> None:
        self._actors: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def actor(self, node_id: str) -> Any:
        """The actor of node ``node_id`` (started now when it has none: Ray starts its process in
        the background; calls wait for it). It holds no resources: the runs' bundles do."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            actor = self._actors.get(node_id)
            if actor is None:
                strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
                options = {"num_cpus": 0, "max_concurrency": NODE_CONCURRENCY}
                remote = ray.remote(NodeWorker).options(scheduling_strategy=strategy, **options)
                actor = self._actors[node_id] = remote.remote()
            return actor

    def prestart(self, node_ids: List[str]) -> None:
        """Start the actors of ``node_ids`` now (their processes start while the runner sets up)."""
        for node_id in node_ids:
            self.actor(node_id)

    def slot(self, node_id: str, run: str) -> NodeSlot:
        return NodeSlot(self.actor(node_id), run)

    def close(self) -> None:
        """Close every node's runs and end its actor."""
        import ray

        with self._lock:
            actors, self._actors = list(self._actors.values()), {}
        try:
            ray.get([a.close.remote() for a in actors], timeout=CLOSE_WAIT_S)
        except Exception:  # noqa: BLE001 -- a lost node: its actor is gone already
            pass
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- already gone with its node
                pass


_pool: Optional[NodePool] = None
_pool_lock = threading.Lock()


def node_pool() -> NodePool:
    """This process's node actors (a new pool once the last one was closed)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = NodePool()
        return _pool


def close_node_pool() -> None:
    """End this process's node actors (the executor closes; the Ray connection goes next)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()
