"""``resources.executor: ray``: one run of a trial as a gang on a Ray cluster.

A run is one placement group of ``slots_per_trial`` bundles (``resources.ray.resources_per_slot``
each; ``pack`` or ``spread``) and one :class:`~determined_lite.launch._ray_slot.SlotWorker`
actor per bundle, which starts det-lite's unchanged worker process on its node. Ranks go node by
node; the engine's plug-in (``launch/_engines.py``) gives each rank its environment, and rank 0's
actor hosts the engine's rendezvous on its node (torch's store, Horovod's Gloo server), bound
there by that actor and published to the ranks: nothing here knows an engine by name.

Only the driver writes the store: the chief's reports come back through its actor
(``reporting/_sink.py``) and are replayed here, in order, on the driver's ``TrialReporter``
before the run is seen to end, and its store questions (``experiment_best_validation``) are
answered from the driver's store; a pause or kill request read from the store goes back to every
rank's node as a flag file. No worker opens SQLite, and no worker reads or writes a driver path:
the context goes through Ray's object store, the spec to the slot actors, and the run's files
come back with their output (``_ray_data.py``); nodes share only the checkpoint storage (checked
at ``create``: ``_ray_cluster.storage_problem``).

:class:`RayRun` is the executor interface's ``TrialRun`` (``poll``,
``wait``, ``stop``): the placement wait, the actors and the output pump run on a thread, so the
runner never blocks on the cluster. The first rank that fails stops the others (as torchrun
does); a lost node or actor ends the gang with an error (a restart, from the latest checkpoint).
The placement group and the actors are removed when the run ends, whatever ended it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import determined_lite
from determined_lite.launch._engines import engine, engine_problem
from determined_lite.launch._executor import EndFn, Executor, Placement, TrialRun
from determined_lite.launch._failures import (
    STOP_GRACE_S,
    stopped_exit_code,
    write_failure_result,
)
from determined_lite.launch._hosts import FORWARDED_ENV, FORWARDED_ENV_PREFIXES
from determined_lite.launch._ray_cluster import (
    RayOptions,
    alive_nodes,
    cluster_problem,
    cluster_slots,
    connect,
)
from determined_lite.launch._ray_data import apply_files, is_cloud, pack_context
from determined_lite.launch._ray_groups import HeldGroups
from determined_lite.launch._ray_node import NodePool, NodeSlot, close_node_pool, node_pool
from determined_lite.launch._ray_place import PlacementTimeout, free_slots, wait_placed
from determined_lite.launch._ray_slot import SlotWorker
from determined_lite.launch._slots import Slot, assign_ranks, gpu_env
from determined_lite.reporting._reporter import stop_requested, store_reporter
from determined_lite.reporting._sink import apply_record
from determined_lite.runtime._failures import FailureKind, NoRestart, record_no_restart
from determined_lite.runtime._next_op import ask_runner
from determined_lite.runtime._spec import WorkerResult, WorkerSpec, WorkerStatus
from determined_lite.storage import load_secrets

OutputFn = Callable[[str], None]
TAKE_WAIT_S = 0.5
LOST_EXIT_CODE = 1
TOTAL_REFRESH_S = 2.0
PLACE_WAIT_S = 60.0


class RayRun(TrialRun):
    """The workers of one trial run on a Ray cluster (see the module's docstring)."""

    def __init__(
        self,
        spec: WorkerSpec,
        spec_path: str,
        options: RayOptions,
        context: Any,
        env: Dict[str, str],
        on_output: Optional[OutputFn],
        release: Callable[["RayRun"], None],
        on_end: Optional[EndFn] = None,
        nodes: Optional[NodePool] = None,
        groups: Optional[HeldGroups] = None,
        warm: Any = None,
    ) -> None:
        self.spec, self.spec_path, self.options = spec, os.path.abspath(spec_path), options
        self._context = context  # the context archive in Ray's object store (_ray_data.py)
        self._warm = warm  # the warm-start checkpoint's archive there (None: none)
        self.placement = Placement(host="ray cluster (placing)", slots=spec.slots)
        self._release = release
        self._nodes = nodes  # the experiment's node actors: a 1-slot CPU run starts on its node's
        self._groups = groups  # the experiment's placement groups between runs (_ray_groups.py)
        self._env, self._on_output, self._on_end = env, on_output, on_end
        self.slots: List[Slot] = []  # where each rank runs, once placed
        self._actors: List[Any] = []  # each bundle's slot: its actor, or a NodeSlot
        self._pg: Any = None
        self._reporter: Any = None
        self._code: Optional[int] = None
        self._done = threading.Event()
        self.placed = threading.Event()  # set once the ranks have their nodes (or the run ended)
        self._stopping = threading.Event()
        self._last_line: Dict[int, str] = {}
        self._thread = threading.Thread(target=self._main, name="ray-trial", daemon=True)
        self._thread.start()

    def poll(self) -> Optional[int]:
        return self._code if self._done.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(["ray trial"], timeout or 0.0)
        assert self._code is not None
        self._release(self)
        return self._code

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """SIGTERM every worker, SIGKILL after ``grace`` seconds; the gang is then removed."""
        self._stopping.set()
        for actor in list(self._actors):
            actor.stop.remote(grace)
        if not self._done.wait(grace + 30.0):
            self._cleanup()
        return self.wait()

    # --- the run, on its own thread -----------------------------------------------------
    def _main(self) -> None:
        code = LOST_EXIT_CODE
        try:
            code = self._run()
        except PlacementTimeout as e:  # recurs on a restart: recorded as not to be restarted
            self._say(f"det-lite: {e}")
            error = f"PlacementTimeout: {e}"
            write_failure_result(self.spec.result_path, error)
            record_no_restart(self.spec.result_path, NoRestart(0, FailureKind.NO_ROOM, error))
        except Exception as e:  # noqa: BLE001 -- a lost node, Ray's errors: the run failed
            self._say(f"det-lite: the Ray run of trial {self.spec.trial_id} failed: {_first_line(e)}")
            write_failure_result(self.spec.result_path, f"Ray executor: {type(e).__name__}: {_first_line(e)}")
        finally:
            self._cleanup()
            self._code = code
            self._done.set()
            self.placed.set()
            if self._on_end is not None:
                self._on_end()

    def _run(self) -> int:
        import ray
        from ray.util.placement_group import placement_group

        connect(self.options)
        n = self.spec.slots
        self._reporter = store_reporter(self.spec)
        self._pg = self._groups.take(n) if self._groups is not None else None
        if self._pg is None:
            bundles = [dict(self.options.resources_per_slot) for _ in range(n)]
            self._pg = placement_group(bundles, strategy=self.options.placement.upper())
        why = wait_placed(self._pg, n, self.options, self.spec.trial_id, self._say, self._stop_why)
        if why == "stop":
            return stopped_exit_code(signal.SIGTERM)
        if why == "pause":  # paused or killed while waiting for slots: stopped where it was
            WorkerResult(WorkerStatus.STOPPED).save(self.spec.result_path)
            return 0
        self._open_slots(n)
        self.slots = assign_ranks(ray.get([a.node.remote() for a in self._actors]))
        where = ", ".join(f"rank {r} on {s.ip} (node {s.node_id[:12]})" for r, s in enumerate(self.slots))
        nodes = list(dict.fromkeys(f"{s.ip} ({s.node_id[:12]})" for s in self.slots))
        host = f"ray node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)}"
        self.placement = Placement(host=host, slots=n)
        self.placed.set()
        self._say(f"det-lite: trial {self.spec.trial_id} placed on the Ray cluster: {where}")
        if self._stopping.is_set():
            return stopped_exit_code(signal.SIGTERM)
        envs, fields = self._rank_envs(), dataclasses.asdict(self.spec)
        secrets = load_secrets(self.spec.experiment_id) if is_cloud(self.spec.exp_conf) else {}
        data = (self._context, secrets, self._warm)
        ray.get([self._actor(r).start.remote(envs[r], fields, *data) for r in range(n)])
        return self._pump()

    def _open_slots(self, n: int) -> None:
        """A slot per bundle: a 1-slot CPU run's on its node's actor (``_ray_node.py``: its
        worker forked by the node's warm server), a gang's or a GPU slot's an actor of its own
        that holds the bundle."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._nodes is not None and n == 1 and not self.options.resources_per_slot.get("GPU"):
            node_id = ray.util.placement_group_table(self._pg)["bundles_to_node_id"][0]
            self._actors.append(self._nodes.slot(node_id, f"{self.spec.trial_id}-{secrets.token_hex(8)}"))
            return
        actor_cls = ray.remote(SlotWorker)
        for i in range(n):
            strategy = PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i)
            options = dict(self.options.actor_options(), scheduling_strategy=strategy)
            self._actors.append(actor_cls.options(**options).remote())

    def _stop_why(self) -> Optional[str]:
        """While the gang waits: "stop" (this run is stopped), "pause" (the store asks), or None."""
        if self._stopping.is_set():
            return "stop"
        reporter = self._reporter
        if reporter is not None and stop_requested(reporter.store, int(self.spec.experiment_id or 0)):
            return "pause"
        return None

    def _actor(self, rank: int) -> Any:
        return self._actors[self.slots[rank].actor]

    def _rank_envs(self) -> List[Dict[str, str]]:
        """Every rank's environment: the driver's forwarded variables (not the engine's interface
        variables: each node reads its own, ``SlotWorker.start``), the trial's, and the engine's,
        with the rendezvous rank 0's slot hosts on its node (``launch/_engines.py``)."""
        import ray

        plugin = engine(self.spec.backend)
        forwarded = (k for k in os.environ if k in FORWARDED_ENV or k.startswith(FORWARDED_ENV_PREFIXES))
        # Ray gives each actor the GPUs of its bundle: the driver's CUDA_VISIBLE_DEVICES is not theirs.
        node_own = ("CUDA_VISIBLE_DEVICES", *plugin.interface_env)
        base = {k: os.environ[k] for k in forwarded if k not in node_own}
        base.update(self._env)
        root = os.path.dirname(os.path.dirname(os.path.abspath(determined_lite.__file__)))
        paths = [p for p in base.get("PYTHONPATH", os.environ.get("PYTHONPATH", "")).split(os.pathsep) if p]
        base["PYTHONPATH"] = os.pathsep.join([root] + [p for p in paths if p != root])
        base.setdefault("PYTHONUNBUFFERED", "1")
        base.setdefault("OMP_NUM_THREADS", str(max(1, int(self.options.resources_per_slot.get("CPU", 1)))))
        places = [dataclasses.asdict(s) for s in self.slots]
        meet = ray.get(self._actor(0).host_rendezvous.remote(self.spec.backend, places))
        return [
            dict(base, **plugin.rank_env(self.spec, self.slots, r, meet), **gpu_env(self.slots, r))
            for r in range(self.spec.slots)
        ]

    def _pump(self) -> int:
        """Output and reports until every worker exited; the code of the first that failed."""
        import ray

        reporter = store_reporter(self.spec)
        pending = {r: self._actor(r).take.remote(TAKE_WAIT_S) for r in range(self.spec.slots)}
        codes: Dict[int, int] = {}
        failed: Optional[int] = None
        asked_stop, next_poll = False, 0.0
        while pending:
            ready, _ = ray.wait(list(pending.values()), num_returns=1, timeout=TAKE_WAIT_S)
            for ref in ready:
                rank = next(r for r, x in pending.items() if x == ref)
                del pending[rank]
                code = self._take(ref, rank, reporter)
                if code is None:
                    pending[rank] = self._actor(rank).take.remote(TAKE_WAIT_S)
                    continue
                codes[rank] = code
                if code != 0 and failed is None:
                    failed = rank
                    for other in pending:  # fail fast, as torchrun does
                        self._actor(other).stop.remote(STOP_GRACE_S)
            if reporter is not None and not asked_stop and time.monotonic() >= next_poll:
                next_poll = time.monotonic() + TAKE_WAIT_S
                if stop_requested(reporter.store, int(self.spec.experiment_id or 0)):
                    for rank in range(self.spec.slots):  # every rank's poll reads its node's flag
                        self._actor(rank).request_stop.remote()
                    asked_stop = True
        if failed is None:
            return 0
        if failed != 0 and not self._stopping.is_set():
            where = f"rank {failed} on {self.slots[failed].host} ({self.slots[failed].ip})"
            write_failure_result(self.spec.result_path, f"{where}: {self._last_line.get(failed, '')}")
        return codes[failed]

    def _take(self, ref: Any, rank: int, reporter: Any) -> Optional[int]:
        """One answer of a slot's ``take``: its lines to the output, the chief's reports to the
        store; the worker's exit code once it exited (a lost actor or node: an error)."""
        import ray

        try:
            out = ray.get(ref)
            apply_files(out["files"], self.spec.result_path, self.spec.tensorboard_path)
        except ray.exceptions.RayError as e:
            slot = self.slots[rank]
            why = f"Ray node {slot.ip} ({slot.host}) or its actor was lost: {_first_line(e)}"
            self._say(f"[rank={rank}] det-lite: {why}")
            if not self._stopping.is_set():
                write_failure_result(self.spec.result_path, f"rank {rank}: {why}")
            self._last_line[rank] = why
            return LOST_EXIT_CODE
        for line in out["lines"]:
            self._say(line)
            if line.strip():
                self._last_line[rank] = line
        if rank == 0 and reporter is not None:
            for record in out["records"]:
                # in order: after the reports before it
                answer = apply_record(reporter, record, self._ask_runner)
                if answer is not None:
                    self._actor(rank).answer.remote(answer)
        return None if out["exit"] is None else int(out["exit"])

    def _ask_runner(self, question: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The chief's next-op question, asked of the runner through the driver's run directory."""
        return ask_runner(self.spec.result_path, question, self.spec.wake_path)

    def _say(self, line: str) -> None:
        if self._on_output is not None:
            self._on_output(line)
        else:
            print(line, flush=True)

    def _cleanup(self) -> None:
        import ray

        for actor in self._actors:
            try:
                if isinstance(actor, NodeSlot):
                    actor.release()  # the node's actor serves the experiment's next runs
                else:
                    ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- already gone with its node
                pass
        self._actors = []
        if self._pg is not None and self._groups is not None and self.slots:  # placed: no longer waiting
            self._groups.give(self.spec.slots, self._pg)  # the next run of this shape takes it
        elif self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001 -- the cluster may be gone
                pass
        self._pg = None


class RayExecutor(Executor):
    """A Ray cluster's slots (``resources.ray.resources_per_slot`` each) as a pool."""

    name = "ray"

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.options = RayOptions.from_config(config)
        self._lock = threading.Lock()
        self._runs: Dict[int, RayRun] = {}  # id(run) -> the run, until it ended
        self._total: Optional[int] = None
        self._total_at = 0.0
        self._contexts: Dict[str, Any] = {}  # a directory the nodes get -> its archive in the object store
        self._groups = HeldGroups()

    @classmethod
    def problem(cls, config: Mapping[str, Any]) -> Optional[str]:
        """No cluster, a node that does not see the storage, or an engine that cannot start here
        (a gang larger than the cluster now waits for nodes: ``_ray_place.py``)."""
        resources = config.get("resources") or {}
        slots = int(resources.get("slots_per_trial") or 1)
        return cluster_problem(RayOptions.from_config(config), config) or engine_problem(
            str(resources.get("distributed_backend") or ""), slots
        )

    def total(self) -> int:
        """The cluster's slots (read again every few seconds: nodes come and go)."""
        now = time.monotonic()
        if self._total is None or now - self._total_at > TOTAL_REFRESH_S:
            connect(self.options)
            self._total, self._total_at = cluster_slots(self.options), now
        return self._total

    def capacity(self) -> int:
        """What Ray says is free now, less this experiment's gangs still waiting; when none of
        them waits, at least one gang: it waits as a pending placement group, the demand a Ray
        autoscaler adds nodes for (``_ray_place.py``)."""
        connect(self.options)
        free = free_slots(self.options) + self._groups.held_slots()
        with self._lock:
            waiting = sum(run.spec.slots for run in self._runs.values() if not run.placed.is_set())
        if waiting:
            return max(0, free - waiting)
        return max(free, int((self.config.get("resources") or {}).get("slots_per_trial") or 1))

    def start(
        self,
        spec: WorkerSpec,
        spec_path: str,
        *,
        on_output: OutputFn,
        env: Dict[str, str],
        pass_fds: Sequence[int] = (),
        on_end: Optional[EndFn] = None,
    ) -> TrialRun:
        """Start the run on the cluster (``pass_fds`` stay with the driver, which holds the
        runner lock itself: processes on other nodes cannot). The spec is kept on the driver
        too; the slots get it through Ray."""
        spec.save(spec_path)
        context = self._archive(spec.context_dir)
        warm = self._archive(spec.warm_start) if spec.warm_start else None
        with self._lock:
            args = (spec, spec_path, self.options, context, env, on_output, self._release, on_end)
            run = RayRun(*args, nodes=node_pool(), groups=self._groups, warm=warm)
            self._runs[id(run)] = run
        # The runner records where the run is: wait for the placement (the runner starts a run
        # only when capacity() holds its gang); on a cluster busy with others' work the run is
        # recorded as still placing after PLACE_WAIT_S and goes on waiting for its slots.
        run.placed.wait(PLACE_WAIT_S)
        return run

    def _archive(self, directory: str) -> Any:
        """The archive of ``directory`` (the context snapshot, a warm-start checkpoint the driver
        holds) in Ray's object store, put once per experiment: a node unpacks it once."""
        import ray

        if directory not in self._contexts:
            connect(self.options)
            self._contexts[directory] = ray.put(pack_context(directory))
        return self._contexts[directory]

    def _release(self, run: RayRun) -> None:
        with self._lock:
            self._runs.pop(id(run), None)

    def workers_fetch_checkpoints(self) -> bool:
        """Each node downloads the checkpoint its run resumes from (``_ray_data.restore_here``)."""
        return True

    def prestart(self, context_dir: str, env: Dict[str, str]) -> None:
        """Connect and find or start the node actors (``_ray_node.py``: they probe the storage
        at create and start 1-slot CPU runs) while the runner sets up."""
        connect(self.options)
        node_pool().prestart([n["NodeID"] for n in alive_nodes()])

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            self._groups.close()
            close_node_pool()
            ray.shutdown()


EXECUTOR = RayExecutor


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
