"""A script entrypoint in a worker: ``python3 train.py ARGS`` run as Determined runs it.

The worker has joined the engine already (one process per slot, under torchrun or horovodrun
as for class trials); it runs the script in this process with :mod:`runpy` (``sys.argv`` set,
the script's directory first on ``sys.path``, ``__name__ == "__main__"``) in the trial's
context directory, with the ``determined`` alias importable. The script finds its trial through
``det.get_cluster_info()`` (``$DET_LITE_TRIAL_SPEC``) and the live :class:`ScriptTrial`
registered here: ``det.pytorch.init()`` takes its hyperparameters, config and distributed
context, ``Trainer.fit`` its searcher length, checkpoint and store hooks, and
``det.core.init()`` its store writer. What the script reported becomes the worker's result.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import os
import runpy
import sys
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from determined_lite.config import OWN_LENGTH
from determined_lite.config._launcher import ScriptCommand
from determined_lite.config.units import length_from_config
from determined_lite.launch._fit import fit_plan, result_of, trial_info
from determined_lite.launch._script_workers import RESULT_ENV, hosting
from determined_lite.launch._watchdog import Heartbeat
from determined_lite.reporting._sink import remote_next_op
from determined_lite.runtime._cluster import (
    active_trial,
    checkpoint_batches,
    get_cluster_info,
    set_active_trial,
)
from determined_lite.runtime._next_op import ask_next_length
from determined_lite.runtime._spec import WorkerResult, WorkerSpec, WorkerStatus

if TYPE_CHECKING:  # torch: imported when the script fits, not by `det-lite run`'s CLI process
    from determined_lite.pytorch._fit_plan import FitPlan

logger = logging.getLogger("determined_lite")


class ScriptExit(RuntimeError):
    """The script called ``sys.exit`` with a failure status (``code``: what it gave)."""

    def __init__(self, message: str, code: Any) -> None:
        super().__init__(message)
        self.code = code


class ScriptTrial:
    """The trial a script runs in this worker: what ``det.pytorch.init()``, ``Trainer.fit`` and
    ``det.core.init()`` read, and what they report back (the worker's result)."""

    def __init__(
        self,
        spec: WorkerSpec,
        distributed: Any,
        extra_callbacks: Sequence[Tuple[str, Any]],
        heartbeat: Optional[Heartbeat] = None,
    ) -> None:
        self.spec = spec
        self.distributed = distributed
        self._extra = list(extra_callbacks)
        self._heartbeat = heartbeat  # the stall watchdog's (None when it is off)
        self._fit_result: Optional[WorkerResult] = None
        self._reporter: Any = None
        self._reporter_made = False
        # What the Core API reported (det.core); the Trainer's result wins when there is one.
        self.steps_completed = checkpoint_batches(spec.latest_checkpoint)  # where this run starts
        self.validation: Optional[Dict[str, Any]] = None
        self.searcher_metric: Optional[float] = None
        self.checkpoints: List[Dict[str, Any]] = []
        self.stopped = False  # the script stopped for a pause/kill (should_preempt said so)
        self.early_exit: Any = None  # the core.EarlyExitReason the script reported
        self.progressed = False  # it reported training or a checkpoint after the one it started from
        self.start_steps = checkpoint_batches(spec.latest_checkpoint)
        self._validation_steps: Optional[int] = None
        self._store: Any = None
        self._core_started = False

    @property
    def target(self) -> int:
        """The searcher's length for this run, as a number in its unit (``op.length``)."""
        return int(next(iter(self.spec.max_length.values())))

    def next_length(self, metric: Optional[float]) -> Optional[int]:
        """The chief's question at the end of an operation (``core.searcher.operations()``): the
        next length when the runner promoted the trial at once (``target`` follows), else None."""
        return ask_next_length(self.spec, metric, remote_next_op())

    # --- what det.core reports --------------------------------------------------------------
    def reported(self) -> bool:
        """Whether the script reported anything in this process (metrics, checkpoints, a fit)."""
        return bool(self._core_started or self._fit_result is not None or self.checkpoints)

    def note_call(self, call: str, every_rank: bool = False) -> None:
        """A Core API call of the script (``core/_calls.py``): progress for the stall watchdog,
        whose message names the last one (``the script after core_context.train...``)."""
        if self._heartbeat is not None:
            self._heartbeat.enter(f"the script after {call}", every_rank=every_rank)

    def core_started(self) -> None:
        """``det.core.init()`` in the script: metrics the interrupted run reported after the
        checkpoint this run starts from are replaced by what this run reports."""
        if not self._core_started and self.reporter is not None:
            self.reporter.restart_at(self.start_steps)
        self._core_started = True

    def note_report(self, group: str, steps: int, metrics: Dict[str, Any]) -> None:
        self.steps_completed = max(self.steps_completed, int(steps))
        if group == "training" and steps > self.start_steps:
            self.progressed = True
        if group == "validation":
            self.validation, self._validation_steps = dict(metrics), int(steps)

    def note_checkpoint(self, uuid: str, path: str, metadata: Dict[str, Any]) -> None:
        """A checkpoint the script stored: registered in the store (retention applied)."""
        total = int(metadata["total_batches"])
        if total > self.start_steps:  # a restart resumes past where this run started
            self.progressed = True
        metrics = self.validation if self._validation_steps == total else None
        self.checkpoints.append({"uuid": uuid, "path": path, "total_batches": total})
        if self.reporter is not None:
            self.reporter.checkpoint(uuid, path, total, metrics)

    def forget_checkpoint(self, uuid: str) -> None:
        if self.reporter is not None:
            self.reporter.forget_checkpoint(uuid)

    def checkpoint_identity(self) -> Dict[str, Any]:
        """What a checkpoint's ``metadata.json`` says of its trial and store."""
        store = os.path.realpath(self.spec.store_path) if self.spec.store_path else None
        return {"trial_id": self.spec.trial_id, "experiment_id": self.spec.experiment_id, "store": store}

    @functools.cached_property
    def time_metric(self) -> Optional[str]:
        """``searcher.time_metric``: the validation metric that measures a Core API script's
        length (``epochs`` too: Determined's scripts report it as a metric)."""
        value = (self.spec.exp_conf.get("searcher") or {}).get("time_metric")
        return str(value) if value is not None else None

    def reached_target(self) -> bool:
        """Whether the last validation's ``searcher.time_metric`` reached the searcher's length
        (the run ends there: ``should_preempt()`` says so; the runner resumes it for more)."""
        name = self.time_metric
        value = (self.validation or {}).get(name) if name is not None else None
        if value is None and name in ("batches", "records", "epochs"):
            value = self._validation_progress(name)
        return self.target != OWN_LENGTH and isinstance(value, (int, float)) and value >= self.target

    def _validation_progress(self, unit: str) -> Optional[float]:
        """Where the last validation stands in ``unit`` when the script did not report it (as
        Determined's training loops do): its ``steps_completed`` are batches; records and epochs
        follow from ``global_batch_size`` and ``records_per_epoch`` when the config has them."""
        if self._validation_steps is None:
            return None
        if unit == "batches":
            return float(self._validation_steps)
        batch_size = self.spec.hparams.get("global_batch_size")
        if not isinstance(batch_size, int):
            return None
        records = self._validation_steps * batch_size
        per_epoch = self.spec.exp_conf.get("records_per_epoch")
        if unit == "records":
            return float(records)
        return records / per_epoch if isinstance(per_epoch, int) and per_epoch > 0 else None

    def experiment_best_validation(self) -> Optional[float]:
        """The chief's reporter answers (from the store, or the driver's under a remote executor)."""
        return None if self.reporter is None else self.reporter.experiment_best_validation()

    def _store_reader(self) -> Any:
        if self._store is None and self.spec.store_path is not None:
            from determined_lite.store import Store

            self._store = Store(self.spec.store_path)
        return self._store

    @property
    def max_length(self) -> Any:
        """The length the searcher asks of this run (a ``TrainUnit``)."""
        return length_from_config(self.spec.max_length, "max_length")

    @property
    def reporter(self) -> Any:
        """The chief's ``TrialReporter`` (store writes), None on other ranks and outside experiments."""
        if not self._reporter_made:
            from determined_lite.reporting._reporter import trial_reporter

            self._reporter = trial_reporter(self.spec, self.distributed.is_chief)
            self._reporter_made = True
        return self._reporter

    def stop_requested(self) -> bool:
        """Whether ``pause`` or ``kill`` was asked of the experiment (from any rank)."""
        if self.reporter is not None:
            return bool(self.reporter.stop_requested())
        from determined_lite.reporting._sink import remote_stop_requested

        remote = remote_stop_requested()  # the driver's flag on this node: no store here
        if remote is not None:
            return remote
        store, eid = self._store_reader(), self.spec.experiment_id
        if store is None or eid is None:
            return False
        from determined_lite.reporting._reporter import stop_requested

        return stop_requested(store, eid)

    def trial_info(self) -> Any:
        return trial_info(self.spec)

    def owns(self, context: Any) -> bool:
        """Whether ``context`` was made for this trial (``det.pytorch.init()`` in the script)."""
        info = context.harness.trial_info
        return bool(info.trial_id == self.spec.trial_id and info.experiment_id == self.spec.experiment_id)

    def fit_plan(self, context: Any, given: FitPlan) -> FitPlan:
        """What ``Trainer.fit`` trains for this trial: the searcher's length (the script's own
        when the searcher has none), the checkpoint to resume from (the script's when the trial
        has none) and the store hooks always; the periods, policy, test mode and
        ``profiling_enabled`` the script chose (``given``'s that are not the defaults), else the
        config's; the script's callbacks."""
        from determined_lite.pytorch._fit_plan import CONFIG_FIELDS

        if self.time_metric not in (None, "batches", "epochs", "records"):
            raise ValueError(
                f"searcher.time_metric {self.time_metric!r}: Trainer.fit trains by batches, epochs or "
                "records; use one of those as the time metric (or the Core API to report your own)"
            )
        plan = fit_plan(self.spec, self.distributed, context, self._extra)
        own_length = self.target == OWN_LENGTH  # no searcher length: the script's, as Determined >= 0.38
        latest = given.latest_checkpoint if plan.latest_checkpoint is None else plan.latest_checkpoint
        return dataclasses.replace(
            plan,
            **given.given((*CONFIG_FIELDS, "test_mode", "profiling_enabled")),
            max_length=given.max_length if own_length else plan.max_length,
            latest_checkpoint=latest,
            callbacks=given.callbacks,
        )

    def fit_done(self, result: Any) -> None:
        self._fit_result = result_of(result)

    def result(self) -> WorkerResult:
        """What the script did, for the runner."""
        from determined_lite.core import EarlyExitReason

        if self.early_exit is EarlyExitReason.INVALID_HP:
            return WorkerResult(
                WorkerStatus.INVALID_HP, error="the script reported an early exit: invalid hp"
            )
        if self._fit_result is not None and self.validation is None:
            return self._fit_result
        validation = dict(self.validation or {})
        metric = self.spec.training_settings().searcher_metric
        if self.searcher_metric is not None and metric is not None:
            validation[metric] = self.searcher_metric
        stopped = self.stopped or self.early_exit is not None
        return WorkerResult(
            status=WorkerStatus.STOPPED if stopped else WorkerStatus.COMPLETED,
            total_batches=self.steps_completed,
            validation_metrics=validation or None,
            checkpoints=self.checkpoints,
        )


def run_script(
    spec: WorkerSpec,
    script: ScriptCommand,
    distributed: Any,
    extra_callbacks: Sequence[Tuple[str, Any]],
    heartbeat: Optional[Heartbeat] = None,
) -> WorkerResult:
    """Run ``script`` for the trial of ``spec`` in this worker and return what it reported;
    ``heartbeat``: the stall watchdog's, which the script's Core API calls keep current."""
    trial = ScriptTrial(spec, distributed, extra_callbacks, heartbeat)
    set_active_trial(trial)
    with _process_group_joined(distributed), hosting(spec, distributed.size) as own_workers:
        run_as_main(script, spec.context_dir)
        reported = own_workers()  # what workers the script started itself reported
    return reported if reported is not None and not trial.reported() else trial.result()


def adopt(distributed: Any) -> None:
    """``det.core.init()`` in a process a trial's script started itself (no live trial here,
    ``det.get_cluster_info()`` set): the trial becomes this process's; its chief writes what it
    reported to ``$DET_LITE_SCRIPT_RESULT`` at exit (see ``launch._script_workers``)."""
    path, info = os.environ.get(RESULT_ENV), get_cluster_info()
    if active_trial() is not None or not path or info is None:
        return
    from determined_lite.distributed import SingleProcessContext

    trial = ScriptTrial(info.spec, distributed or SingleProcessContext(), [])
    set_active_trial(trial)
    if trial.distributed.is_chief:
        atexit.register(lambda: trial.result().save(path))


@contextlib.contextmanager
def _process_group_joined(distributed: Any) -> Iterator[None]:
    """Determined's torch scripts call ``torch.distributed.init_process_group`` themselves; the
    worker has joined the trial's process group already (loopback, det-lite's timeouts), so
    while the script runs a second call is answered by that group instead of failing."""
    if distributed.backend != "torch":
        yield
        return
    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if dist.is_initialized():
            logger.info(
                "init_process_group: the trial's process group is joined already (%s)", dist.get_backend()
            )
            return
        original(*args, **kwargs)

    dist.init_process_group = init_process_group
    try:
        yield
    finally:
        dist.init_process_group = original


def run_as_main(script: ScriptCommand, directory: str) -> None:
    """Run ``script`` as ``python3 PATH|-m MODULE ARGS`` would, from ``directory``; a non-zero
    ``sys.exit`` raises :class:`ScriptExit`."""
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [script.argv0, *script.args]
    try:
        if script.module is not None:
            sys.path.insert(0, directory)
            runpy.run_module(script.module, run_name="__main__", alter_sys=True)
        else:
            path = str(script.path)  # run_path makes it sys.argv[0], as python3 PATH does
            if os.path.realpath(directory) != os.path.realpath(os.getcwd()):
                path = os.path.join(directory, path)
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise ScriptExit(f"{script.argv0} exited with status {e.code}", e.code) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
