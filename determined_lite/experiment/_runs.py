"""The trial runs an experiment runner has in flight: started from the search's queue while slots
and ``max_concurrent_trials`` allow (each from its trial's latest checkpoint, placed by the
executor), polled, and their ends turned into the search's events: a metric for the searcher, a
restart from the latest checkpoint, an early exit, a requeue while pausing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Dict, Iterable, Iterator, Optional

from determined_lite._errors import warning_line
from determined_lite._progress import read_progress
from determined_lite.config import OWN_LENGTH, ExperimentSettings
from determined_lite.experiment._gc import reconcile_experiment
from determined_lite.experiment._progress import SHORT_UUID, Progress, where_text
from determined_lite.experiment._requests import TrialRequest, metric_at_target
from determined_lite.experiment._search import Search
from determined_lite.experiment._shared_machine import oversubscription
from determined_lite.experiment._trial_launch import TrialLauncher
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.experiment._wakeup import Wakeup
from determined_lite.launch import WorkerResult, WorkerSpec, WorkerStatus
from determined_lite.launch._executor import TrialRun
from determined_lite.runtime._failures import FailurePoint, read_failure_point, read_no_restart, repeat_reason
from determined_lite.runtime._spec import progress_path
from determined_lite.searcher import Close, ExitReason
from determined_lite.store._states import Action, TrialState


class StopSearch(Exception):
    """A trial failed det-lite's check, which every trial would fail: the search stops."""


@dataclasses.dataclass
class Run:
    """One run of a trial, in flight."""

    request: TrialRequest
    process: TrialRun
    spec: WorkerSpec
    length: int
    reported: bool = False  # its length's metric went to the searcher as it ran (_next_ops.py)


class Runs:
    """The experiment's runs in flight, by request id (see the module's docstring)."""

    def __init__(
        self,
        store: Any,
        experiment_id: int,
        search: Search,
        launcher: TrialLauncher,
        settings: ExperimentSettings,
        logs: TrialLogs,
        progress: Progress,
        wakeup: Wakeup,
    ) -> None:
        self.store, self.id, self.search, self.launcher = store, experiment_id, search, launcher
        self.settings, self.logs, self.progress, self.wakeup = settings, logs, progress, wakeup
        self.metric = search.settings.metric
        self.running: Dict[str, Run] = {}
        self.failed_at: Dict[str, Optional[FailurePoint]] = {}  # each trial's last failure
        self.fail_fast: Optional[str] = None  # why the search stops: a check every trial would fail
        self.warned_shared = False  # other experiments oversubscribe the slots: said once
        search.watch(self)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.running

    def __len__(self) -> int:
        return len(self.running)

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self.running.values()))

    def close(self, request_id: str) -> None:
        if request_id in self.running and not self.running[request_id].reported:
            self.running.pop(request_id).process.stop()

    # --- starting ---------------------------------------------------------------------------
    def _capacity(self) -> bool:
        max_concurrent = self.search.settings.max_concurrent_trials
        if max_concurrent and len(self.running) >= max_concurrent:
            return False
        return self.settings.slots_per_trial <= self.launcher.executor.capacity()

    def start_queued(self) -> None:
        """Start the search's queued requests while there are slots for them."""
        search = self.search
        if not (search.queue and self._capacity()):
            return  # the loop's common pass: nothing changed, nothing to save
        while search.queue and self._capacity():
            request = search.requests[search.queue.pop(0)]
            if request.pending is not None and not request.closed:
                self._start(request)
        search.save()  # the queue it took from (every other change saves where it is made)

    def _latest_checkpoint(self, trial_id: int) -> Optional[Dict[str, Any]]:
        checkpoints = self.store.checkpoints.list(trial_id=trial_id)
        return max(checkpoints, key=lambda c: c["total_batches"]) if checkpoints else None

    def _fetch_here(self) -> bool:
        """Whether the runner fetches a cloud checkpoint for the run's workers (not when they
        fetch it on their own nodes)."""
        return not self.launcher.executor.workers_fetch_checkpoints()

    def _start(self, request: TrialRequest) -> None:
        assert request.pending is not None
        trial_id = request.trial_id
        latest = self._latest_checkpoint(trial_id)
        if latest is not None and self._at_target(request, latest["total_batches"]):
            return
        path = latest["path"] if latest else None
        storage = self.search.retention.storage  # a cloud store's
        if latest is not None and storage is not None and self._fetch_here():
            path = storage.local_copy(latest["uuid"], path)  # fetched here for the workers
        process = self.launcher.start(
            trial_id,
            request.hparams,
            request.seed,
            request.pending,
            path,
            on_output=lambda line: self.logs.on_output(trial_id, line),
            on_end=self.wakeup.wake,
        )
        self.running[request.request_id] = Run(request, process, process.spec, request.pending)
        self._warn_shared_machine()
        self.store.trials.update(trial_id, state=TrialState.ACTIVE, started_at=time.time())
        self.store.trials.add_run(trial_id, executor=self.settings.executor, **process.placement.to_json())
        resumed = ""
        if latest:
            resumed = f" from checkpoint {latest['uuid'][:SHORT_UUID]} (batch {latest['total_batches']})"
        where = f" on {process.placement.describe()}" if process.placement.devices else ""
        goal = self.launcher.goal(request.pending)
        self.logs.log(trial_id, f"trial {trial_id} starts: {goal}{resumed}{where}")
        self.progress.start(trial_id, request.hparams, where=where_text(process.placement.to_json()))

    def _at_target(self, request: TrialRequest, total_batches: int) -> bool:
        """Whether the trial's checkpoint at ``total_batches`` is at its pending length already:
        then its validation there goes to the searcher, and no run starts (none is relaunched)."""
        pending, settings = request.pending or 0, self.search.settings
        at = metric_at_target(self.store, request.trial_id, total_batches, pending, settings)
        if at is None or self.search.test_mode:
            return False
        why = f"is at its target already (batch {total_batches}): not run again"
        self.logs.log(request.trial_id, f"trial {request.trial_id} {why}")
        request.trained, request.pending = request.pending or 0, None
        self.search.report(request, at, request.trained)
        return True

    def _warn_shared_machine(self) -> None:
        """Once: other running experiments and this one take more slots than the executor has."""
        if self.warned_shared:
            return
        wanted = len(self.running) * self.settings.slots_per_trial
        warning = oversubscription(self.store, self.id, wanted, self.launcher.executor.total())
        if warning:
            self.warned_shared = True
            self.logs.log(None, warning_line(warning))

    # --- ends -------------------------------------------------------------------------------
    def poll(self, pausing: bool) -> None:
        """Handle the runs that ended (``pausing``: a stopped or failed one is requeued);
        raises :class:`StopSearch` when one failed a check every trial would fail."""
        for rid, run in list(self.running.items()):
            code = run.process.poll()
            # Read after the poll: a run that exited has written its last progress.
            self.progress.update(run.request.trial_id, read_progress(progress_path(run.spec.result_path)))
            if code is None:
                continue
            run.process.wait()
            del self.running[rid]
            self.progress.stop(run.request.trial_id)
            self.handle_exit(run, code, pausing)
        if self.fail_fast is not None:
            raise StopSearch(self.fail_fast)

    def handle_exit(self, run: Run, code: int, pausing: bool) -> None:
        """What the run's exit ``code`` (and its result file) means for its trial and the search."""
        request, search = run.request, self.search
        if run.reported:  # the searcher had its metric (_next_ops.py): resumed if promoted since
            if request.pending is not None and not request.closed:
                search.requeue(request)
            return
        result = run.process.result(code)
        if result.status == WorkerStatus.COMPLETED:
            self._completed(run, result)
        elif result.status == WorkerStatus.STOPPED:
            if pausing or self.store.requests.pending(self.id) in (Action.PAUSE, Action.KILL):
                search.requeue(request)  # resumes from its checkpoint on activate
            else:  # the trial asked to stop (context.set_stop_requested)
                search.exit_early(request, ExitReason.USER_CANCELED, TrialState.COMPLETED)
        elif result.status == WorkerStatus.INVALID_HP:
            self.logs.log(request.trial_id, f"trial {request.trial_id} raised InvalidHP: {result.error}")
            search.exit_early(request, ExitReason.INVALID_HP, TrialState.CANCELED)
        elif result.action_required:  # a full disk, an untrusted checkpoint: a restart fails alike
            why = "it cannot go on until the error above is fixed; pausing the experiment"
            self.logs.log(request.trial_id, f"trial {request.trial_id} stopped: {why}")
            search.pausing = True
            search.requeue(request)
            self.store.requests.request(self.id, Action.PAUSE)  # other trials stop at a checkpoint
        else:
            self._failed(run, result, pausing)

    def _completed(self, run: Run, result: WorkerResult) -> None:
        request = run.request
        request.trained = run.length
        request.pending = None
        metric = self._reported_metric(run, result)
        if metric is None:
            self.logs.log(request.trial_id, f"trial {request.trial_id} reported no {self.metric!r}")
            self.search.exit_early(request, ExitReason.ERRORED, TrialState.ERROR)
            return
        self.search.save()
        if self.search.test_mode:
            self.search.apply([Close(request.request_id)])
            self.search.shutdown = True
            return
        self.search.report(request, float(metric), run.length)

    def _reported_metric(self, run: Run, result: WorkerResult) -> Optional[float]:
        """The searcher metric of a completed run (NaN: a script that trains to its own length)."""
        trial_id = run.request.trial_id
        metric = (result.validation_metrics or {}).get(self.metric)
        if metric is None and not result.validation_metrics:
            # Resumed from a checkpoint already at the target (its run was interrupted after
            # the final checkpoint): the validation it reported then is in the store.
            metric = self._stored_metric(trial_id, result.total_batches)
        if metric is None and run.length == OWN_LENGTH:
            # A script with no searcher length (Determined >= 0.38): exiting 0 completes it.
            self.logs.log(trial_id, f"trial {trial_id} completed without reporting {self.metric!r}")
            metric = math.nan
        return metric

    def _stored_metric(self, trial_id: int, total_batches: int) -> Optional[float]:
        for v in reversed(self.store.metrics.validation(trial_id)):
            if v["total_batches"] == total_batches and self.metric in v["metrics"]:
                return v["metrics"][self.metric]
        return None

    def _failed(self, run: Run, result: WorkerResult, pausing: bool) -> None:
        """A run that failed: requeue it (pausing), restart it, or end it (a check stops the search)."""
        request, search = run.request, self.search
        rid, path = request.request_id, run.spec.result_path
        no_restart, point = read_no_restart(path), read_failure_point(path)
        # A run not restarted for what its worker recorded: the worker printed the error above,
        # so one line says what happens, without the error's text again.
        once = bool(no_restart) and not pausing and not search.test_mode
        failed = no_restart[0].failed_line() if once else result.error
        self.logs.log(request.trial_id, f"trial {request.trial_id} failed: {failed}")
        self.reconcile()  # a worker that died hard may have left a checkpoint unregistered
        why = no_restart[0].reason() if no_restart else repeat_reason(point, self.failed_at.get(rid))
        self.failed_at[rid] = point
        if pausing:
            search.requeue(request)
        elif why is not None and not search.test_mode:
            if not once:
                self.logs.log(request.trial_id, f"trial {request.trial_id} not restarted: {why}")
            search.exit_early(request, ExitReason.ERRORED, TrialState.ERROR)
            searching = search.queue or self.running or search.held or not search.shutdown
            if no_restart and no_restart[0].fails_every_trial and searching:
                self.fail_fast = no_restart[0].search_stop(request.trial_id)
        elif request.restarts < self.settings.max_restarts and not search.test_mode:
            self._restart(request)
        else:
            search.exit_early(request, ExitReason.ERRORED, TrialState.ERROR)

    def _restart(self, request: TrialRequest) -> None:
        request.restarts += 1
        self.store.trials.update(request.trial_id, restarts=request.restarts)
        latest = self._latest_checkpoint(request.trial_id)
        start = f"its latest checkpoint (batch {latest['total_batches']})" if latest else "the start"
        count = f"{request.restarts}/{self.settings.max_restarts}"
        self.logs.log(request.trial_id, f"restarting trial {request.trial_id} from {start} ({count})")
        self.search.requeue(request)

    # --- stopping ---------------------------------------------------------------------------
    def kill_trials(self, trial_ids: Iterable[int]) -> None:
        """``Trial.kill()`` (the SDK's, ``store.request_trial_kill``): each trial stops now (its
        process group), ends CANCELED and its searcher is told it exited early; the experiment's
        other trials and the search go on, as in Determined."""
        killed = set(trial_ids)
        if not killed:
            return
        stopped = False
        for request in list(self.search.requests.values()):
            if request.trial_id not in killed:
                continue
            if not request.finished:
                run = self.running.pop(request.request_id, None)
                if run is not None:
                    run.process.stop()
                    self.progress.stop(request.trial_id)
                    stopped = True
                if request.request_id in self.search.queue:
                    self.search.queue.remove(request.request_id)
                self.logs.log(request.trial_id, f"trial {request.trial_id} killed; the search goes on")
                self.search.exit_early(request, ExitReason.USER_CANCELED, TrialState.CANCELED)
            self.store.requests.clear_trial_kill(request.trial_id)
        if stopped:
            self.reconcile()  # checkpoints a stopped run left unregistered
        self.search.save()

    def stop_processes(self) -> None:
        """Stop every run's processes, and nothing else (the store may be unwritable)."""
        for run in self.running.values():
            run.process.stop()

    def stop_all(self) -> None:
        """Stop every run now; each is queued to resume from its latest checkpoint."""
        self.stop_processes()
        for rid, run in self.running.items():
            self.progress.stop(run.request.trial_id)
            if rid not in self.search.queue:
                self.search.queue.insert(0, rid)
        self.running.clear()
        self.search.save()
        self.reconcile()

    def reconcile(self) -> None:
        """Register or remove what dead trial processes left in the checkpoint root (_gc.py)."""
        report = reconcile_experiment(self.store, self.id)
        for line in report.lines() + report.problems:
            self.logs.log(None, line)
