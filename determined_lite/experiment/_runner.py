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
import logging
import math
import os
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO

from determined_lite._errors import ActionRequired
from determined_lite._progress import read_progress
from determined_lite.config import (
    OWN_LENGTH,
    ExperimentSettings,
    SearcherSettings,
    searched_paths,
)
from determined_lite.experiment._endings import RunnerEndings
from determined_lite.experiment._hangup import detach_output, pausing_line
from determined_lite.experiment._lock import RunnerLock
from determined_lite.experiment._next_ops import answer_next_ops, wait_s
from determined_lite.experiment._progress import SHORT_UUID, Progress, where_text
from determined_lite.experiment._requests import SearchState, TrialRequest, metric_at_target, trial_seed
from determined_lite.experiment._shared_machine import warn_shared_machine
from determined_lite.experiment._trial_kills import apply_trial_kills
from determined_lite.experiment._trial_launch import TrialLauncher
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.experiment._wakeup import Wakeup
from determined_lite.launch import WorkerResult, WorkerSpec, WorkerStatus
from determined_lite.launch._executor import TrialRun
from determined_lite.reporting._retention import RetentionPolicy
from determined_lite.runtime._failures import FailurePoint, read_failure_point, read_no_restart, repeat_reason
from determined_lite.runtime._spec import progress_path
from determined_lite.searcher import Close, Create, ExitReason, Shutdown, ValidateAfter, make_searcher
from determined_lite.store._db import dumps_json
from determined_lite.store._paths import experiment_dir, make_private_dirs
from determined_lite.store._states import Action, ExperimentState, TrialState

logger = logging.getLogger("determined_lite.experiment")

POLL_S = 0.5  # the loop wakes on a run's end and Ctrl-C (_wakeup.py); on the store at least this often


class _StopSearch(Exception):
    """A trial failed det-lite's check, which every trial would fail: the search stops."""


@dataclasses.dataclass
class _Run:
    request: TrialRequest
    process: TrialRun
    spec: WorkerSpec
    length: int
    reported: bool = False  # its length's metric went to the searcher as it ran (_next_ops.py)


class ExperimentRunner(RunnerEndings):
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
        experiment = store.experiments.get(experiment_id)
        if experiment is None:
            raise ValueError(f"experiment {experiment_id} not found")
        self.config: Dict[str, Any] = experiment["config"]
        self.test_mode = test_mode
        # The stored config was validated by `experiment create`: read, never checked again.
        self.settings = ExperimentSettings.from_config(self.config)
        self.searcher_settings = SearcherSettings.from_config(self.config["searcher"])
        self.metric = self.searcher_settings.metric
        self.retention = RetentionPolicy.from_config(
            self.config, self.metric, self.searcher_settings.smaller_is_better, experiment_id
        )
        pass_fds = (lock.fileno(),) if lock is not None else ()
        self.launcher = TrialLauncher.of(
            store, experiment, self.settings, self.searcher_settings, test_mode, pass_fds
        )
        self.searcher = self._searcher(single=test_mode)
        self.requests: Dict[str, TrialRequest] = {}
        self.queue: List[str] = []
        self.running: Dict[str, _Run] = {}
        self.shutdown = False
        self.pausing = False  # a pause was requested: trials stop at a checkpoint, none start
        # Searcher operations that would start new trials, held while pausing (run on activate).
        self.held: List[Any] = []
        self.stop_signals = 0  # Ctrl-C / SIGTERM received: the first pauses, the second stops now
        self.hangups = 0  # SIGHUP received (the terminal closed): each pauses, none stops now
        self.run_dir = experiment_dir(experiment_id)
        self.varying = searched_paths(self.config["hyperparameters"])
        self.progress = Progress(enabled=show_progress, out=out, varying=self.varying)
        self.logs = TrialLogs(store, experiment_id, self.progress, echo=echo_logs)
        self._log = self.logs.log
        self.warned_shared = False  # other experiments oversubscribe the slots: said once
        self.final_line: Optional[str] = None  # how the run ended, printed after the summary
        self.failed_at: Dict[str, Optional[FailurePoint]] = {}  # each trial's last failure
        self.fail_fast: Optional[str] = None  # why the search stops: a check every trial would fail
        self._saved_state: Optional[str] = None  # the searcher state last stored, as JSON
        self._wakeup = Wakeup()  # what ends the loop's wait (_wakeup.py)

    # --- state ------------------------------------------------------------------------------
    def _save_state(self) -> None:
        """Store the search's state (each change calls this; an unchanged state is not written)."""
        state = SearchState(self.requests, self.queue, self.shutdown, self.held).to_json(self.searcher)
        if (text := dumps_json(state, "searcher state")) != self._saved_state:
            self.store.experiments.save_searcher_state(self.id, state)
            self._saved_state = text

    def _searcher(self, single: bool) -> Any:
        """The config's searcher; ``single``: one trial of its space (--test, as Determined's)."""
        settings = dataclasses.replace(self.searcher_settings, name="single") if single else None
        space, seed = self.config["hyperparameters"], self.settings.experiment_seed
        return make_searcher(settings or self.searcher_settings, space, seed)

    def _load_state(self) -> bool:
        saved = self.store.experiments.load_searcher_state(self.id)
        if saved and saved["searcher"].get("searcher") != self.searcher.name:  # a --test run's
            self.searcher = self._searcher(single=True)
        state = SearchState.load(saved, self.searcher)
        if state is None:
            return False
        self.requests, self.queue = state.requests, state.queue
        self.shutdown, self.held = state.shutdown, state.held
        return True

    # --- searcher operations ----------------------------------------------------------------
    def _apply(self, operations: Sequence[Any]) -> None:
        for op in operations:
            if self._hold(op):
                continue
            if isinstance(op, Create):
                seed = trial_seed(self.settings.experiment_seed, op.request_id)
                trial_id = self.store.trials.create(self.id, op.request_id, op.hparams, seed)
                self.requests[op.request_id] = TrialRequest(op.request_id, trial_id, op.hparams, seed)
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
                if op.request_id in self.running and not self.running[op.request_id].reported:
                    self.running.pop(op.request_id).process.stop()  # (a reported run ends by itself)
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

    def _finish(self, request: TrialRequest, state: TrialState) -> None:
        request.finished = True
        self.store.trials.update(request.trial_id, state=state, stopped_early=request.stopped_early)
        self._apply_retention()

    # --- main loop --------------------------------------------------------------------------
    def run(self, resume: bool = False) -> int:
        self.launcher.prestart()  # the fork server warms up while the runner sets up
        self.store.experiments.set_running(self.id, os.getpid())
        make_private_dirs(self.run_dir)
        if self.launcher.wake_path:
            self._wakeup.listen(self.launcher.wake_path)  # the runs' chiefs announce their questions
        self._log(None, f"experiment {self.id} started by process {os.getpid()}")
        self._reconcile()
        if not (resume and self._load_state()):
            self._apply(self.searcher.initial_operations())
        else:
            for request in self.requests.values():
                if not request.finished:
                    self.store.trials.update(request.trial_id, state=TrialState.ACTIVE)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        for sig in previous:
            signal.signal(sig, self._on_stop_signal)
        try:
            return self._loop()
        except _StopSearch as e:
            return self._stop_search(str(e))
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
                self.logs.flush()
            finally:
                self.progress.close()
            self.store.experiments.set_pid(self.id, None)
            self.launcher.executor.close()
            self._wakeup.close()  # after the signal handlers that write to it are gone

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: the first pauses the experiment as `det-lite experiment pause` does
        (the loop requests it: trials stop at a checkpoint where they are); the second stops now.
        SIGHUP (the terminal closed) pauses, the output going on in runner.log (_hangup.py)."""
        if signum == signal.SIGHUP:
            detach_output(self.run_dir)
        self.hangups += signum == signal.SIGHUP
        self.stop_signals += signum != signal.SIGHUP
        self._wakeup.wake_from_signal()
        if self.stop_signals > 1:
            raise KeyboardInterrupt

    def _loop(self) -> int:
        if not self.pausing:
            self._release_held()
        signals_seen = 0
        while True:
            if self.stop_signals + self.hangups > signals_seen:
                signals_seen = self.stop_signals + self.hangups
                self.store.requests.request(self.id, Action.PAUSE)
                self._log(None, pausing_line(self.id, hangup=self.hangups > 0))
            action = self.store.requests.pending(self.id)
            if action == Action.KILL:
                self.pausing = True  # no new trial starts or is created
                self._poll_running(pausing=True)  # trials that just finished keep their state
                self._stop_all()
                self._end(ExperimentState.CANCELED, trial_state=TrialState.CANCELED)
                self.store.requests.clear(self.id)
                return 1
            if action == Action.PAUSE:
                self.pausing = True
            apply_trial_kills(self)
            answer_next_ops(self)
            # Runs that ended first: the slots they free are filled in the same pass.
            self._poll_running(self.pausing)
            if not self.pausing:
                self._start_queued()
            self.logs.flush()
            if not self.running:
                if self.pausing:
                    self.store.requests.clear(self.id)
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
            self._wakeup.wait(wait_s(self, POLL_S))  # a run's end, a signal; else the store again

    def _capacity(self) -> bool:
        max_concurrent = self.searcher_settings.max_concurrent_trials
        if max_concurrent and len(self.running) >= max_concurrent:
            return False
        return self.settings.slots_per_trial <= self.launcher.executor.capacity()

    def _start_queued(self) -> None:
        if not (self.queue and self._capacity()):
            return  # the loop's common pass: nothing changed, nothing to save
        while self.queue and self._capacity():
            rid = self.queue.pop(0)
            request = self.requests[rid]
            if request.pending is None or request.closed:
                continue
            self._start(request)
        self._save_state()  # the queue it took from (every other change saves where it is made)

    def _latest_checkpoint(self, trial_id: int) -> Optional[Dict[str, Any]]:
        checkpoints = self.store.checkpoints.list(trial_id=trial_id)
        return max(checkpoints, key=lambda c: c["total_batches"]) if checkpoints else None

    def _start(self, request: TrialRequest) -> None:
        assert request.pending is not None
        trial_id = request.trial_id
        latest = self._latest_checkpoint(trial_id)
        if latest is not None and self._at_target(request, latest["total_batches"]):
            return
        path = latest["path"] if latest else None
        if latest is not None and self.retention.storage is not None:  # a cloud store's, fetched
            path = self.retention.storage.local_copy(latest["uuid"], path)
        process = self.launcher.start(
            trial_id,
            request.hparams,
            request.seed,
            request.pending,
            path,
            on_output=lambda line: self.logs.on_output(trial_id, line),
            on_end=self._wakeup.wake,
        )
        self.running[request.request_id] = _Run(request, process, process.spec, request.pending)
        warn_shared_machine(self)
        self.store.trials.update(trial_id, state=TrialState.ACTIVE, started_at=time.time())
        self.store.trials.add_run(trial_id, executor=self.settings.executor, **process.placement.to_json())
        resumed = ""
        if latest:
            resumed = f" from checkpoint {latest['uuid'][:SHORT_UUID]} (batch {latest['total_batches']})"
        where = f" on {process.placement.describe()}" if process.placement.devices else ""
        self._log(trial_id, f"trial {trial_id} starts: {self.launcher.goal(request.pending)}{resumed}{where}")
        self.progress.start(trial_id, request.hparams, where=where_text(process.placement.to_json()))

    def _at_target(self, request: TrialRequest, total_batches: int) -> bool:
        """Whether the trial's checkpoint at ``total_batches`` is at its pending length already:
        then its validation there goes to the searcher, and no run starts (none is relaunched)."""
        at = metric_at_target(
            self.store, request.trial_id, total_batches, request.pending or 0, self.searcher_settings
        )
        if at is None or self.test_mode:
            return False
        why = f"is at its target already (batch {total_batches}): not run again"
        self._log(request.trial_id, f"trial {request.trial_id} {why}")
        request.trained, request.pending = request.pending or 0, None
        self._apply(self.searcher.on_validation_completed(request.request_id, at, request.trained))
        return True

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
        if self.fail_fast is not None:
            raise _StopSearch(self.fail_fast)

    def _handle_exit(self, run: _Run, code: int, pausing: bool) -> None:
        request = run.request
        if run.reported:  # the searcher had its metric (_next_ops.py): resumed if promoted since
            if request.pending is not None and not request.closed:
                self._requeue(request)
            return
        result = run.process.result(code)
        if result.status == WorkerStatus.COMPLETED:
            self._completed(run, result)
        elif result.status == WorkerStatus.STOPPED:
            if pausing or self.store.requests.pending(self.id) in (Action.PAUSE, Action.KILL):
                self._requeue(request)  # resumes from its checkpoint on activate
            else:  # the trial asked to stop (context.set_stop_requested)
                self._exit_early(request, ExitReason.USER_CANCELED, TrialState.COMPLETED)
        elif result.status == WorkerStatus.INVALID_HP:
            self._log(request.trial_id, f"trial {request.trial_id} raised InvalidHP: {result.error}")
            self._exit_early(request, ExitReason.INVALID_HP, TrialState.CANCELED)
        elif result.action_required:  # a full disk, an untrusted checkpoint: a restart fails alike
            why = "it cannot go on until the error above is fixed; pausing the experiment"
            self._log(request.trial_id, f"trial {request.trial_id} stopped: {why}")
            self.pausing = True
            self._requeue(request)
            self.store.requests.request(self.id, Action.PAUSE)  # other trials stop at a checkpoint
        else:
            self._failed(run, result, pausing)

    def _requeue(self, request: TrialRequest) -> None:
        """Run the trial again first (from its latest checkpoint) when trials start again."""
        self.queue.insert(0, request.request_id)
        self._save_state()

    def _completed(self, run: _Run, result: WorkerResult) -> None:
        request = run.request
        request.trained = run.length
        request.pending = None
        metric = self._reported_metric(run, result)
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

    def _reported_metric(self, run: _Run, result: WorkerResult) -> Optional[float]:
        """The searcher metric of a completed run (NaN: a script that trains to its own length)."""
        trial_id = run.request.trial_id
        metric = (result.validation_metrics or {}).get(self.metric)
        if metric is None and not result.validation_metrics:
            # Resumed from a checkpoint already at the target (its run was interrupted after
            # the final checkpoint): the validation it reported then is in the store.
            metric = self._stored_metric(trial_id, result.total_batches)
        if metric is None and run.length == OWN_LENGTH:
            # A script with no searcher length (Determined >= 0.38): exiting 0 completes it.
            self._log(trial_id, f"trial {trial_id} completed without reporting {self.metric!r}")
            metric = math.nan
        return metric

    def _failed(self, run: _Run, result: WorkerResult, pausing: bool) -> None:
        """A run that failed: requeue it (pausing), restart it, or end it (a check stops the search)."""
        request = run.request
        rid, path = request.request_id, run.spec.result_path
        no_restart, point = read_no_restart(path), read_failure_point(path)
        # A run not restarted for what its worker recorded: the worker printed the error above,
        # so one line says what happens, without the error's text again.
        once = bool(no_restart) and not pausing and not self.test_mode
        failed = no_restart[0].failed_line() if once else result.error
        self._log(request.trial_id, f"trial {request.trial_id} failed: {failed}")
        self._reconcile()  # a worker that died hard may have left a checkpoint unregistered
        why = no_restart[0].reason() if no_restart else repeat_reason(point, self.failed_at.get(rid))
        self.failed_at[rid] = point
        if pausing:
            self._requeue(request)
        elif why is not None and not self.test_mode:
            if not once:
                self._log(request.trial_id, f"trial {request.trial_id} not restarted: {why}")
            self._exit_early(request, ExitReason.ERRORED, TrialState.ERROR)
            searching = self.queue or self.running or self.held or not self.shutdown
            if no_restart and no_restart[0].fails_every_trial and searching:
                self.fail_fast = no_restart[0].search_stop(request.trial_id)
        elif request.restarts < self.settings.max_restarts and not self.test_mode:
            self._restart(request)
        else:
            self._exit_early(request, ExitReason.ERRORED, TrialState.ERROR)

    def _restart(self, request: TrialRequest) -> None:
        request.restarts += 1
        self.store.trials.update(request.trial_id, restarts=request.restarts)
        latest = self._latest_checkpoint(request.trial_id)
        start = f"its latest checkpoint (batch {latest['total_batches']})" if latest else "the start"
        count = f"{request.restarts}/{self.settings.max_restarts}"
        self._log(request.trial_id, f"restarting trial {request.trial_id} from {start} ({count})")
        self._requeue(request)

    def _stop_search(self, why: str) -> int:
        """Fail fast (Ray Tune's ``fail_fast``): stop every trial, end the experiment in ERROR."""
        self._log(None, why)
        self._stop_all()
        self._end(ExperimentState.ERROR, trial_state=TrialState.CANCELED)
        return 1

    def _stored_metric(self, trial_id: int, total_batches: int) -> Optional[float]:
        for v in reversed(self.store.metrics.validation(trial_id)):
            if v["total_batches"] == total_batches and self.metric in v["metrics"]:
                return v["metrics"][self.metric]
        return None

    def _exit_early(self, request: TrialRequest, reason: str, state: TrialState) -> None:
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
