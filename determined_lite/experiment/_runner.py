"""Run an experiment: the searcher decides, the launcher trains, the store remembers.

One runner process per active experiment (the foreground ``det-lite experiment create`` or its
``--detach``-ed twin). It turns searcher operations into trial runs, starts them while slots
and ``max_concurrent_trials`` allow, restarts failed trials from their latest checkpoint,
promotes ASHA trials by resuming them, answers pause/kill requests, and applies the
checkpoint retention policy. Its own state (searcher + requests) is saved to the store after
every event, so ``activate`` resumes a paused or killed experiment exactly where it stood.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO

from determined_lite._errors import ActionRequired
from determined_lite._progress import read_progress
from determined_lite.config import TrainingSettings, environment_variables, searched_paths, validate_searcher
from determined_lite.config._schema import OWN_LENGTH
from determined_lite.config._settings import TEST_MODE_STEPS, TEST_MODE_VALIDATION_BATCHES
from determined_lite.experiment._gc import reconcile_experiment
from determined_lite.experiment._lock import RunnerLock, RunnerPhase
from determined_lite.experiment._progress import SHORT_UUID, Progress, summary
from determined_lite.experiment._warm_start import warm_start_checkpoint
from determined_lite.launch import TrialProcess, WorkerResult, WorkerSpec, WorkerStatus, launch
from determined_lite.launch._watchdog import remove_heartbeats
from determined_lite.reporting._retention import RetentionPolicy, apply_retention
from determined_lite.runtime._failures import read_no_restart, remove_no_restart
from determined_lite.runtime._spec import progress_path
from determined_lite.searcher import Close, Create, ExitReason, Shutdown, ValidateAfter, make_searcher
from determined_lite.searcher._ops import op_from_dict, op_to_dict
from determined_lite.store._paths import (
    checkpoint_root,
    context_snapshot_dir,
    experiment_dir,
    make_private_dirs,
)
from determined_lite.store._states import Action, ExperimentState, TrialState
from determined_lite.tensorboard import trial_tensorboard_path

logger = logging.getLogger("determined_lite.experiment")

POLL_S = 0.1


def trial_seed(experiment_seed: int, request_id: str) -> int:
    """A trial's seed: fixed by the experiment seed and the searcher's request id."""
    digest = hashlib.sha256(f"{experiment_seed}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31)


def available_slots() -> int:
    """Slots on this machine: ``$DET_LITE_SLOTS``, else the CPU count."""
    return max(1, int(os.environ.get("DET_LITE_SLOTS") or os.cpu_count() or 1))


@dataclasses.dataclass
class _Request:
    """One searcher request, i.e. one trial, and where it stands."""

    request_id: str
    trial_id: int
    hparams: Dict[str, Any]
    seed: int
    pending: Optional[int] = None  # length (searcher units) to train to; None when idle
    trained: int = 0  # length reached and reported to the searcher
    closed: bool = False
    finished: bool = False  # the trial's state is final
    restarts: int = 0
    stopped_early: bool = False  # the searcher closed it before max_length (ASHA)


@dataclasses.dataclass
class _Run:
    request: _Request
    process: TrialProcess
    spec: WorkerSpec
    length: int


class ExperimentRunner:
    """Drives one experiment to completion (or pause/kill) and returns the exit code."""

    def __init__(
        self,
        store: Any,
        experiment_id: int,
        *,
        test_mode: bool = False,
        out: TextIO = sys.stdout,
        show_progress: bool = True,
        echo_logs: bool = True,
        lock: Optional[RunnerLock] = None,
    ) -> None:
        self.store = store
        self.lock = lock  # the experiment's runner lock (_lock.py), handed to each trial's processes
        self.id = experiment_id
        experiment = store.get_experiment(experiment_id)
        if experiment is None:
            raise ValueError(f"experiment {experiment_id} not found")
        self.config: Dict[str, Any] = experiment["config"]
        snapshot = context_snapshot_dir(experiment_id)
        # Trials run from the snapshot `experiment create` made (older experiments: the original).
        self.context_dir: str = snapshot if os.path.isdir(snapshot) else experiment["context_dir"]
        self.test_mode = test_mode
        self.out = out
        self.echo_logs = echo_logs
        searcher_settings = validate_searcher(self.config["searcher"])
        self.searcher_settings = searcher_settings
        self.metric: str = searcher_settings.metric
        self.smaller_is_better: bool = searcher_settings.smaller_is_better
        self.retention = RetentionPolicy.from_config(self.config, self.metric, self.smaller_is_better)
        self.unit = searcher_settings.unit
        self.training_settings = TrainingSettings.from_config(self.config)  # carried by every WorkerSpec
        self.warm_start = warm_start_checkpoint(self.config, store)  # checked by experiment create
        self.searcher = make_searcher(
            searcher_settings, self.config.get("hyperparameters") or {}, self._experiment_seed()
        )
        resources = self.config.get("resources") or {}
        self.slots_per_trial = int(resources.get("slots_per_trial") or 1)
        self.backend = resources.get("distributed_backend") or "horovod"
        self.hosts: Optional[List[str]] = resources.get("hosts") or None
        self.max_restarts = int(self.config.get("max_restarts", 5))
        self.max_concurrent = searcher_settings.max_concurrent_trials or 0
        self.requests: Dict[str, _Request] = {}
        self.queue: List[str] = []
        self.running: Dict[str, _Run] = {}
        self.shutdown = False
        self.pausing = False  # a pause was requested: trials stop at a checkpoint, none start
        # Searcher operations that would start new trials, held while pausing (run on activate).
        self.held: List[Any] = []
        self.stop_signals = 0  # Ctrl-C / SIGTERM received: the first pauses, the second stops now
        self.run_dir = experiment_dir(experiment_id)
        self._log_lock = threading.Lock()
        self._log_buffer: List[tuple] = []
        self.varying = searched_paths(self.config.get("hyperparameters") or {})
        self.progress = Progress(enabled=show_progress, out=out, varying=self.varying)
        self.final_line: Optional[str] = None  # how the run ended, printed after the summary

    # --- state ------------------------------------------------------------------------------
    def _experiment_seed(self) -> int:
        return int((self.config.get("reproducibility") or {}).get("experiment_seed") or 0)

    def _save_state(self) -> None:
        self.store.save_searcher_state(
            self.id,
            {
                "searcher": self.searcher.state_dict(),
                "requests": {rid: dataclasses.asdict(r) for rid, r in self.requests.items()},
                "queue": self.queue,
                "shutdown": self.shutdown,
                "held": [op_to_dict(op) for op in self.held],
            },
        )

    def _load_state(self) -> bool:
        state = self.store.load_searcher_state(self.id)
        if not state:
            return False
        self.searcher.load_state_dict(state["searcher"])
        self.requests = {rid: _Request(**r) for rid, r in state["requests"].items()}
        self.shutdown = state["shutdown"]
        self.held = [op_from_dict(op) for op in state.get("held", [])]
        # Runs that were in flight when the experiment stopped go back to the queue.
        self.queue = list(state["queue"])
        for rid, request in self.requests.items():
            if request.pending is not None and rid not in self.queue:
                self.queue.append(rid)
        return True

    # --- searcher operations ----------------------------------------------------------------
    def _apply(self, operations: Sequence[Any]) -> None:
        for op in operations:
            if self._hold(op):
                continue
            if isinstance(op, Create):
                seed = trial_seed(self._experiment_seed(), op.request_id)
                trial_id = self.store.create_trial(self.id, op.request_id, op.hparams, seed)
                self.requests[op.request_id] = _Request(op.request_id, trial_id, op.hparams, seed)
            elif isinstance(op, ValidateAfter):
                request = self.requests[op.request_id]
                request.pending = op.length
                if op.request_id not in self.queue and op.request_id not in self.running:
                    self.queue.append(op.request_id)
            elif isinstance(op, Close):
                request = self.requests[op.request_id]
                request.closed = True
                request.pending = None
                if op.request_id in self.queue:
                    self.queue.remove(op.request_id)
                if op.request_id in self.running:
                    self.running.pop(op.request_id).process.stop()
                if not request.finished:
                    full = self.searcher_settings.max_length
                    request.stopped_early = not self.test_mode and request.trained < full
                    self._finish(request, TrialState.COMPLETED)
            elif isinstance(op, Shutdown):
                self.shutdown = True
            else:
                raise TypeError(f"unknown searcher operation {op!r}")
        self._save_state()

    def _hold(self, op: Any) -> bool:
        """While pausing, keep a new trial (and what the searcher asks of it) for activation."""
        held_ids = {h.request_id for h in self.held if isinstance(h, Create)}
        if not (self.pausing and (isinstance(op, Create) or getattr(op, "request_id", None) in held_ids)):
            return False
        self.held.append(op)
        return True

    def _release_held(self) -> None:
        operations, self.held = self.held, []
        if operations:
            self._apply(operations)

    def _finish(self, request: _Request, state: TrialState) -> None:
        request.finished = True
        self.store.update_trial(request.trial_id, state=state)
        self._apply_retention()

    # --- main loop --------------------------------------------------------------------------
    def run(self, resume: bool = False) -> int:
        self.store.set_experiment_state(self.id, ExperimentState.ACTIVE)
        self.store.set_experiment_pid(self.id, os.getpid())
        make_private_dirs(self.run_dir)
        self._log(None, f"experiment {self.id} started by process {os.getpid()}")
        self._reconcile()
        if not (resume and self._load_state()):
            self._apply(self.searcher.initial_operations())
        else:
            for request in self.requests.values():
                if not request.finished:
                    self.store.update_trial(request.trial_id, state=TrialState.ACTIVE)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, self._on_stop_signal)
        try:
            return self._loop()
        except KeyboardInterrupt:
            # A second Ctrl-C / SIGTERM: stop the trials now (each resumes from its latest
            # checkpoint) and leave the experiment resumable by `activate`.
            self._stop_all()
            self._mark_paused("interrupted")
            return 1
        except ActionRequired:  # the store's disk is full: stop; `activate` resumes (ACTIVE, no process)
            for run in self.running.values():
                run.process.stop()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            try:
                self._flush_logs()
            finally:
                self.progress.close()
            self.store.set_experiment_pid(self.id, None)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: the first pauses the experiment as `det-lite experiment pause` does
        (the loop requests it: trials stop at a checkpoint where they are); the second stops now."""
        self.stop_signals += 1
        if self.stop_signals > 1:
            raise KeyboardInterrupt

    def _loop(self) -> int:
        if not self.pausing:
            self._release_held()
        signals_seen = 0
        while True:
            if self.stop_signals > signals_seen:
                signals_seen = self.stop_signals
                self.store.request_action(self.id, Action.PAUSE)
                self._log(
                    None,
                    f"pausing experiment {self.id}: its trials stop at a checkpoint at the next "
                    "scheduling-unit boundary (Ctrl-C again to stop them now)",
                )
            action = self.store.pending_action(self.id)
            if action == Action.KILL:
                self.pausing = True  # no new trial starts or is created
                self._poll_running(pausing=True)  # trials that just finished keep their state
                self._stop_all()
                self._end(ExperimentState.CANCELED, trial_state=TrialState.CANCELED)
                self.store.clear_action(self.id)
                return 1
            if action == Action.PAUSE:
                self.pausing = True
            if not self.pausing:
                self._start_queued()
            self._poll_running(self.pausing)
            self._flush_logs()
            if not self.running:
                if self.pausing:
                    self.store.clear_action(self.id)
                    if self.queue or self.held or not self.shutdown:
                        self._mark_paused("paused")
                        return 1
                    # The search finished while pausing: nothing is left to resume.
                if not self.queue:
                    if not self.shutdown:
                        self._log(
                            None, "searcher has no more work but did not shut down; ending the experiment"
                        )
                    return self._complete()
            time.sleep(POLL_S)

    def _capacity(self) -> bool:
        if self.max_concurrent and len(self.running) >= self.max_concurrent:
            return False
        used = len(self.running) * self.slots_per_trial
        # A trial larger than the machine still runs, alone.
        return used + self.slots_per_trial <= available_slots() or not self.running

    def _start_queued(self) -> None:
        while self.queue and self._capacity():
            rid = self.queue.pop(0)
            request = self.requests[rid]
            if request.pending is None or request.closed:
                continue
            self._start(request)
        self._save_state()

    def _latest_checkpoint(self, trial_id: int) -> Optional[Dict[str, Any]]:
        checkpoints = self.store.list_checkpoints(trial_id=trial_id)
        return max(checkpoints, key=lambda c: c["total_batches"]) if checkpoints else None

    def _start(self, request: _Request) -> None:
        assert request.pending is not None
        trial_dir = os.path.join(self.run_dir, f"trial_{request.trial_id}")
        make_private_dirs(trial_dir)
        latest = self._latest_checkpoint(request.trial_id)
        spec = WorkerSpec(
            entrypoint=self.config["entrypoint"],
            context_dir=self.context_dir,
            exp_conf=self.config,
            hparams=request.hparams,
            result_path=os.path.join(trial_dir, "result.json"),
            max_length={self.unit: request.pending},
            trial_seed=request.seed,
            trial_id=request.trial_id,
            experiment_id=self.id,
            latest_checkpoint=latest["path"] if latest else None,
            warm_start=None if latest else self.warm_start,
            test_mode=self.test_mode,
            store_path=self.store.path,
            checkpoint_root=checkpoint_root(self.config),
            tensorboard_path=trial_tensorboard_path(self.id, request.trial_id),
            backend="single" if self.slots_per_trial == 1 and not self.hosts else self.backend,
            slots=self.slots_per_trial,
            settings=self.training_settings.to_json(),
        )
        for stale in (spec.result_path, progress_path(spec.result_path)):
            if os.path.exists(stale):
                os.unlink(stale)
        remove_no_restart(spec.result_path)
        remove_heartbeats(spec.result_path)
        trial_id = request.trial_id
        process = launch(
            spec,
            os.path.join(trial_dir, "spec.json"),
            hosts=self.hosts,
            on_output=lambda line: self._on_output(trial_id, line),
            env=self._worker_env(),
            pass_fds=[self.lock.fileno()] if self.lock is not None else [],
        )
        self.running[request.request_id] = _Run(request, process, spec, request.pending)
        self.store.update_trial(trial_id, state=TrialState.ACTIVE)
        resumed = ""
        if latest:
            resumed = f" from checkpoint {latest['uuid'][:SHORT_UUID]} (batch {latest['total_batches']})"
        if self.test_mode:
            k = self.training_settings.aggregation_frequency
            what = (
                f"test of {TEST_MODE_STEPS} optimizer steps ({TEST_MODE_STEPS * k} batches), "
                f"{TEST_MODE_VALIDATION_BATCHES} validation batches and a checkpoint"
            )
        else:
            what = f"train to {request.pending} {self.searcher_settings.time_metric or self.unit}"
            if request.pending == OWN_LENGTH:
                what = "train to the length the script sets"
        self._log(trial_id, f"trial {trial_id} starts: {what}{resumed}")
        self.progress.start(trial_id, request.hparams)

    def _worker_env(self) -> Dict[str, str]:
        """``environment.environment_variables``, plus one intra-op thread per slot by default.

        On CPU a slot is a core: workers that each spun up threads for every core would fight
        over them when trials run side by side. ``OMP_NUM_THREADS`` set by the user wins.
        """
        env = environment_variables(self.config)
        if "OMP_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // available_slots()))
        return env

    def _poll_running(self, pausing: bool) -> None:
        for rid, run in list(self.running.items()):
            code = run.process.poll()
            # Read after the poll: a run that exited has written its last progress.
            self.progress.update(run.request.trial_id, read_progress(progress_path(run.spec.result_path)))
            if code is None:
                continue
            run.process.wait()
            del self.running[rid]
            self.progress.stop(run.request.trial_id)
            self._handle_exit(run, code, pausing)

    def _handle_exit(self, run: _Run, code: int, pausing: bool) -> None:
        request = run.request
        result = WorkerResult.after_exit(run.spec.result_path, code)
        if result.status == WorkerStatus.COMPLETED:
            request.trained = run.length
            request.pending = None
            metric = (result.validation_metrics or {}).get(self.metric)
            if metric is None and not result.validation_metrics:
                # Resumed from a checkpoint already at the target (its run was interrupted after
                # the final checkpoint): the validation it reported then is in the store.
                metric = self._stored_metric(request.trial_id, result.total_batches)
            if metric is None and run.length == OWN_LENGTH:
                # A script with no searcher length (Determined >= 0.38): exiting 0 completes it.
                what = f"trial {request.trial_id} completed without reporting {self.metric!r}"
                self._log(request.trial_id, what)
                metric = math.nan
            if metric is None:
                self._log(request.trial_id, f"trial {request.trial_id} reported no {self.metric!r}")
                self._exit_early(request, ExitReason.ERRORED, TrialState.ERROR)
                return
            self._save_state()
            if self.test_mode:
                self._apply([Close(request.request_id)])
                self.shutdown = True
                return
            self._apply(self.searcher.on_validation_completed(request.request_id, float(metric), run.length))
        elif result.status == WorkerStatus.STOPPED:
            if pausing or self.store.pending_action(self.id) in (Action.PAUSE, Action.KILL):
                self.queue.insert(0, request.request_id)  # resumes from its checkpoint on activate
                self._save_state()
            else:  # the trial asked to stop (context.set_stop_requested)
                self._exit_early(request, ExitReason.USER_CANCELED, TrialState.COMPLETED)
        elif result.status == WorkerStatus.INVALID_HP:
            self._log(request.trial_id, f"trial {request.trial_id} raised InvalidHP: {result.error}")
            self._exit_early(request, ExitReason.INVALID_HP, TrialState.CANCELED)
        elif result.action_required:  # a full disk, an untrusted checkpoint: a restart fails alike
            why = "it cannot go on until the error above is fixed; pausing the experiment"
            self._log(request.trial_id, f"trial {request.trial_id} stopped: {why}")
            self.queue.insert(0, request.request_id)
            self.pausing = True
            self._save_state()
            self.store.request_action(self.id, Action.PAUSE)  # other trials stop at a checkpoint
        else:
            self._log(request.trial_id, f"trial {request.trial_id} failed: {result.error}")
            self._reconcile()  # a worker that died hard may have left a checkpoint unregistered
            no_restart = read_no_restart(run.spec.result_path)
            if pausing:
                self.queue.insert(0, request.request_id)
                self._save_state()
            elif no_restart and not self.test_mode:
                why = no_restart[0].reason()
                self._log(request.trial_id, f"trial {request.trial_id} not restarted: {why}")
                self._exit_early(request, ExitReason.ERRORED, TrialState.ERROR)
            elif request.restarts < self.max_restarts and not self.test_mode:
                request.restarts += 1
                self.store.update_trial(request.trial_id, restarts=request.restarts)
                self._log(
                    request.trial_id,
                    f"restarting trial {request.trial_id} from its latest checkpoint "
                    f"({request.restarts}/{self.max_restarts})",
                )
                self.queue.insert(0, request.request_id)
                self._save_state()
            else:
                self._exit_early(request, ExitReason.ERRORED, TrialState.ERROR)

    def _stored_metric(self, trial_id: int, total_batches: int) -> Optional[float]:
        for v in reversed(self.store.validation_metrics(trial_id)):
            if v["total_batches"] == total_batches and self.metric in v["metrics"]:
                return v["metrics"][self.metric]
        return None

    def _exit_early(self, request: _Request, reason: str, state: TrialState) -> None:
        request.pending = None
        request.closed = True
        self._finish(request, state)
        self._apply(self.searcher.on_trial_exited_early(request.request_id, reason))

    def _stop_all(self) -> None:
        for run in self.running.values():
            run.process.stop()
            self.progress.stop(run.request.trial_id)
        for rid in self.running:
            if rid not in self.queue:
                self.queue.insert(0, rid)
        self.running.clear()
        self._save_state()
        self._reconcile()

    def _reconcile(self) -> None:
        """Register or remove what dead trial processes left in the checkpoint root (_gc.py)."""
        report = reconcile_experiment(self.store, self.id)
        for line in report.lines() + report.problems:
            self._log(None, line)

    def _stopping(self) -> None:
        """Tell contenders for the lock that this runner is exiting (before the state says so)."""
        if self.lock is not None:
            self.lock.record(os.getpid(), RunnerPhase.STOPPING)

    def _mark_paused(self, why: str) -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                self.store.update_trial(request.trial_id, state=TrialState.PAUSED)
        self._apply_retention()
        self.store.set_experiment_state(self.id, ExperimentState.PAUSED)
        self._final(f"experiment {self.id} {why}; resume with: det-lite experiment activate {self.id}")

    def _end(self, state: ExperimentState, trial_state: TrialState) -> None:
        self._stopping()
        for request in self.requests.values():
            if not request.finished:
                request.finished = True
                self.store.update_trial(request.trial_id, state=trial_state)
        self._apply_retention()
        self.store.set_experiment_state(self.id, state)
        self._save_state()
        self._final(f"experiment {self.id} {state}")

    def _complete(self) -> int:
        trials = self.store.list_trials(self.id)
        ok = any(t["state"] == TrialState.COMPLETED for t in trials)
        self._end(
            ExperimentState.COMPLETED if ok else ExperimentState.ERROR, trial_state=TrialState.COMPLETED
        )
        return 0 if ok else 1

    # --- checkpoints ------------------------------------------------------------------------
    def _apply_retention(self) -> None:
        """The whole experiment's policy (each chief applies it to its trial as it registers)."""
        unfinished = [r.trial_id for r in self.requests.values() if not r.finished]
        apply_retention(self.store, self.id, self.retention, unfinished)

    # --- logs -------------------------------------------------------------------------------
    def _on_output(self, trial_id: int, line: str) -> None:
        rank = None
        if line.startswith("[rank "):
            head, _, rest = line.partition("] ")
            try:
                rank = int(head[len("[rank ") :])
                line = rest
            except ValueError:
                pass
        with self._log_lock:
            self._log_buffer.append((trial_id, rank, line, True))

    def _log(self, trial_id: Optional[int], text: str, echo: bool = True) -> None:
        with self._log_lock:
            self._log_buffer.append((trial_id, None, text, echo))

    def _final(self, text: str) -> None:
        """How the run ended: into the experiment's logs now, on the terminal once, after the
        summary (``final_line``)."""
        self.final_line = text
        self._log(None, text, echo=False)

    def _flush_logs(self) -> None:
        with self._log_lock:
            batch, self._log_buffer = self._log_buffer, []
        if not batch:
            return
        by_trial: Dict[Optional[int], List[tuple]] = {}
        for trial_id, rank, text, echo in batch:
            by_trial.setdefault(trial_id, []).append((rank, text))
            if self.echo_logs and echo:
                where = f"[trial {trial_id}] " if trial_id is not None else ""
                who = f"[rank {rank}] " if rank is not None else ""
                self.progress.write(f"{where}{who}{text}")
        for trial_id, lines in by_trial.items():
            self.store.add_logs(trial_id, lines, experiment_id=self.id)

    # --- summary ----------------------------------------------------------------------------
    def summary(self) -> str:
        """The trials best first by the searcher metric, their best checkpoints, the best trial."""
        return summary(
            self.store.describe_experiment(self.id),
            metric=self.metric,
            smaller_is_better=self.smaller_is_better,
            varying=self.varying,
            stopped_early={r.trial_id for r in self.requests.values() if r.stopped_early},
        )
