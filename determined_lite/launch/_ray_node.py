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
difference. The server is started by the node actor with no idle time of its own: it ends as
soon as no actor is connected to it (an actor ended idle, or killed with its node or cluster)
and its forked workers have exited.

A node actor outlives the experiment that started it, as a local runner's server does: it is a
detached actor named by its node, the driver's installation and the driver's Ray job runtime
environment (:func:`actor_name`; namespace ``det-lite``), which
the next experiment's driver finds (``get_if_exists``) with its fork server warm, and it ends
itself after ``$DET_LITE_FORKSERVER_IDLE_S`` (600 s) without a call and without a run. Each
driver releases only its own runs; two experiments may share a node's actor. With an idle time
of 0 the actor is the experiment's own and ends with it.

Gangs (2 or more slots) and GPU slots keep their per-rank slot actors (``_ray.py``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

from determined_lite._timeouts import FORKSERVER_IDLE_ENV, env_seconds
from determined_lite.launch._forkserver import ForkServer, enabled, image_digest
from determined_lite.launch._ray_slot import SlotWorker, probe_storage
from determined_lite.launch._server_registry import DEFAULT_IDLE_S
from determined_lite.launch._server_registry import server_key as installation_key

NODE_CONCURRENCY = 64  # a thread per waiting call: each run's take(), stop() and answer()
CLOSE_WAIT_S = 10.0
NAMESPACE = "det-lite"  # the node actors' Ray namespace (a driver's own is anonymous)
ATTACH_TRIES = 10  # an actor found just as it ends idle: a new one once its name is free
IDLE_CHECK_S = 5.0
ATTACH_TIMEOUT_S = 300.0  # a node actor's process start, however loaded the node (then an error)
# SlotWorker's methods the driver calls on a slot, here with the run's key first.
SLOT_METHODS = tuple("node host_rendezvous rendezvous_port start take answer request_stop stop".split())


def server_key(env: Dict[str, str]) -> str:
    """The socket name of the node's fork server for workers with ``env``: the installation's
    key and the image's digest."""
    return hashlib.sha256(f"{installation_key()}-{image_digest(env)}".encode()).hexdigest()[:24]


def actor_name(node_id: str, runtime_env: str) -> str:
    """The name of the node actor of ``node_id`` for drivers of this installation whose Ray job
    has ``runtime_env`` (a detached actor keeps the runtime environment of the job that started
    it: a job with other packages or variables gets an actor, and a fork server, of its own)."""
    digest = hashlib.sha256(f"{installation_key()}-{runtime_env}".encode()).hexdigest()[:24]
    return f"det-lite-node-{node_id}-{digest}"


class NodeEnding(RuntimeError):
    """The node actor is ending (idle): the driver starts a new one."""


class NodeWorker:
    """On one node: the node's fork server and the 1-slot runs placed there, each a
    :class:`SlotWorker` (without an actor of its own) named by its run's key. ``idle_s`` > 0:
    it ends itself after that long without a call and without a run."""

    def __init__(self, idle_s: float = 0.0) -> None:
        os.umask(0o077)  # a forked worker gets the umask of the process that asks for it
        self._slots: Dict[str, SlotWorker] = {}
        self._servers: Dict[str, Optional[ForkServer]] = {}
        self._lock = threading.Lock()
        self._last_call = time.monotonic()
        self._ending = False
        if idle_s > 0:
            threading.Thread(
                target=self._end_when_idle, args=(idle_s,), name="det-lite-idle", daemon=True
            ).start()

    def attach(self) -> int:
        """A driver's first call in an experiment: this actor serves it (not ending); its pid."""
        with self._lock:
            if self._ending:
                raise NodeEnding("this node's det-lite actor is ending (idle)")
            self._last_call = time.monotonic()
        return os.getpid()

    def probe(self, config: Dict[str, Any], files: Dict[str, str]) -> Dict[str, Any]:
        """What this node cannot reach of the checkpoint storage (``_ray_slot.probe_storage``)."""
        self.attach()
        return probe_storage(config, files)

    def _end_when_idle(self, idle_s: float) -> None:
        """End this actor (and with it its fork server) once idle for ``idle_s``."""
        while True:
            time.sleep(min(IDLE_CHECK_S, idle_s))
            with self._lock:
                if self._slots or time.monotonic() - self._last_call < idle_s:
                    continue
                self._ending = True
            self.close()
            _end_this_actor()
            return

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
                    server = ForkServer(env, key=key, idle_s=0.0)  # it ends with its actors
                except OSError:
                    server = None
                self._servers[key] = server
            return server

    def _slot(self, run: str) -> SlotWorker:
        with self._lock:
            self._last_call = time.monotonic()
            return self._slots[run]

    def node(self, run: str) -> Dict[str, Any]:
        """Open the slot of ``run``; where it is (``SlotWorker.node``)."""
        slot = SlotWorker(self._server)
        with self._lock:
            if self._ending:
                raise NodeEnding("this node's det-lite actor is ending (idle)")
            self._slots[run] = slot
            self._last_call = time.monotonic()
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

    def release(self, *runs: str) -> None:
        """The runs ended: their slots closed (``SlotWorker.close``)."""
        for run in runs:
            with self._lock:
                slot = self._slots.pop(run, None)
                self._last_call = time.monotonic()
            if slot is not None:
                slot.close()

    def close(self) -> None:
        """This actor ends: every slot closed, its servers' connections closed (a server ends once
        no actor is connected to it and its workers have exited)."""
        self.release(*list(self._slots))
        for server in self._servers.values():
            if server is not None:
                server.close()
        self._servers.clear()


def _end_this_actor() -> None:
    """Ray ends this actor's process and its children (the fork server); its name is free."""
    import ray

    try:
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
    except Exception:  # noqa: BLE001 -- no Ray to ask: the process ends all the same
        os._exit(0)


class _Bound:
    """``actor.method`` with the run's key as its first argument (``.remote(...)``)."""

    def __init__(self, method: Any, run: str) -> None:
        self._method, self._run = method, run

    def remote(self, *args: Any) -> Any:
        return self._method.remote(self._run, *args)


class NodeSlot:
    """A 1-slot run's slot on its node's actor, used as a slot's own actor is
    (``slot.take.remote(timeout)``); :meth:`release` ends it."""

    def __init__(self, node: Any, run: str, released: Callable[[str], None]) -> None:
        self._node, self.run, self._released = node, run, released
        for name in SLOT_METHODS:
            setattr(self, name, _Bound(getattr(node, name), run))

    def release(self) -> None:
        self._node.release.remote(self.run)
        self._released(self.run)


class NodePool:
    """The driver's node actors: one per node, found or started lazily (one pool per process, as
    its Ray connection is: ``experiment create`` prestarts them with the executor it checks the
    config with, and its runner's executor uses them: :func:`node_pool`). ``idle_s``: how long an
    actor stays after its last call (0: it is this pool's own and ends with it)."""

    def __init__(self, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.idle_s = idle_s
        self._actors: Dict[str, Any] = {}
        self._node_locks: Dict[str, threading.Lock] = {}
        self._runs: Dict[str, Set[str]] = {}  # node id -> this pool's runs open there
        self._lock = threading.Lock()

    def actor(self, node_id: str) -> Any:
        """The actor of node ``node_id``: this pool's, the node's running one, or a new one
        (started now: Ray starts its process; the first call waits for it). It holds no
        resources: the runs' bundles do."""
        with self._lock:
            node_lock = self._node_locks.setdefault(node_id, threading.Lock())
        with node_lock:
            actor = self._actors.get(node_id)
            if actor is None:
                actor = self._actors[node_id] = self._attach(node_id)
            return actor

    def _attach(self, node_id: str) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: Dict[str, Any] = {
            "num_cpus": 0,
            "max_concurrency": NODE_CONCURRENCY,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
        }
        if self.idle_s <= 0:  # this experiment's own
            return ray.remote(NodeWorker).options(**options).remote(0.0)
        name = actor_name(node_id, ray.get_runtime_context().get_runtime_env_string())
        options.update(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True)
        for attempt in range(ATTACH_TRIES):
            actor: Any = ray.remote(NodeWorker).options(**options).remote(self.idle_s)
            try:
                ray.get(actor.attach.remote(), timeout=ATTACH_TIMEOUT_S)
                return actor
            except (ray.exceptions.RayActorError, NodeEnding):  # it ended idle, or is ending
                if attempt == ATTACH_TRIES - 1:
                    raise
                time.sleep(min(1.0, 0.2 * (attempt + 1)))  # until the ending one's name is free
        raise AssertionError("unreachable")

    def prestart(self, node_ids: List[str]) -> None:
        """Find or start the actors of ``node_ids`` in the background (a cold one's process
        starts while the runner sets up)."""
        for node_id in node_ids:
            threading.Thread(target=self._prestart_one, args=(node_id,), daemon=True).start()

    def _prestart_one(self, node_id: str) -> None:
        try:
            self.actor(node_id)
        except Exception:  # noqa: BLE001 -- only an optimisation: a run's own call says why
            pass

    def slot(self, node_id: str, run: str) -> NodeSlot:
        actor = self.actor(node_id)
        with self._lock:
            self._runs.setdefault(node_id, set()).add(run)
        return NodeSlot(actor, run, lambda r: self._forget(node_id, r))

    def _forget(self, node_id: str, run: str) -> None:
        with self._lock:
            self._runs.get(node_id, set()).discard(run)

    def close(self) -> None:
        """Release this pool's runs still open; end the actors that are its own (idle 0)."""
        import ray

        with self._lock:
            actors, self._actors = dict(self._actors), {}
            runs, self._runs = self._runs, {}
        try:
            if self.idle_s > 0:
                calls = [actors[n].release.remote(*r) for n, r in runs.items() if r and n in actors]
            else:
                calls = [a.close.remote() for a in actors.values()]
            ray.get(calls, timeout=CLOSE_WAIT_S)
        except Exception:  # noqa: BLE001 -- a lost node: its actor is gone already
            pass
        if self.idle_s > 0:
            return
        for actor in actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- already gone with its node
                pass


_pool: Optional[NodePool] = None
_pool_lock = threading.Lock()


def node_pool() -> NodePool:
    """This process's node actors (a new pool once the last one was closed); their idle time is
    ``$DET_LITE_FORKSERVER_IDLE_S``, as a local fork server's."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = NodePool(env_seconds(FORKSERVER_IDLE_ENV, DEFAULT_IDLE_S))
        return _pool


def close_node_pool() -> None:
    """Release this process's runs on the node actors (the executor closes; the Ray connection
    goes next)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()
