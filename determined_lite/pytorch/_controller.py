"""THE training loop: one loop for one process or many, hooks dispatched from one place.

Distribution lives in ``context.distributed``: this file calls its collectives and gradient
hooks and never branches on the backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import numbers
from typing import Any, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from determined_lite._errors import (
    MetricTypeError,
    MissingMetricError,
    NotADataLoaderError,
    OutputTypeError,
)
from determined_lite.config import (
    DEFAULT_SMALLER_IS_BETTER,
    CheckpointPolicy,
    TrainUnit,
)
from determined_lite.pytorch import _rng
from determined_lite.pytorch._callback import CallbackList, PyTorchCallback, global_callbacks, name_callbacks
from determined_lite.pytorch._checkpointing import CheckpointWriter, trial_class_spec
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._fetch import in_process_batches
from determined_lite.pytorch._fit_plan import FitPlan
from determined_lite.pytorch._forward_hooks import ForwardHooks
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._hooks import Hook
from determined_lite.pytorch._reducer import check_evaluation_reducer, merge_reducer_metrics, plain_metrics
from determined_lite.pytorch._restore import Restored, Restorer, resume_batches
from determined_lite.pytorch._schedule import Plan, decide, is_better, quiet_until
from determined_lite.pytorch._sharding import set_epoch
from determined_lite.pytorch._train_result import TrainResult
from determined_lite.pytorch._training_metrics import training_cross_slot, training_partial
from determined_lite.pytorch._trial import PyTorchTrial
from determined_lite.pytorch._validation import Validation, evaluation_mode

logger = logging.getLogger("determined_lite")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec(FitPlan):
    """A :class:`FitPlan` resolved for the loop by ``Trainer.run``: its length known, where
    checkpoints go, the searcher metric, and the ids its checkpoints carry (None: the context's)."""

    max_length: TrainUnit
    checkpoint_root: str = ""
    code_source: Optional[str] = None
    searcher_metric: Optional[str] = None
    smaller_is_better: bool = DEFAULT_SMALLER_IS_BETTER
    trial_info: Optional[TrialInfo] = None


class TrialController:
    """Runs one trial on one worker: setup, then train (report, validate, checkpoint), then cleanup."""

    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        spec: RunSpec,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
        callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
    ) -> None:
        self.trial = trial
        self.context = context
        self.harness = context.harness
        self.state = context.harness.state
        self.spec = spec
        self.dist = context.distributed
        self.result = TrainResult(
            searcher_metric=spec.searcher_metric, smaller_is_better=spec.smaller_is_better
        )
        self._core_callbacks = list(core_callbacks)
        self._trainer_callbacks = list(callbacks)  # Trainer(callbacks=) and fit(callbacks=), named
        self._check_trial()

    # --- setup ------------------------------------------------------------------------------
    def _check_trial(self) -> None:
        if not isinstance(self.trial, PyTorchTrial):
            raise TypeError(
                f"Trainer needs a determined_lite.pytorch.PyTorchTrial, got {type(self.trial).__name__}"
            )
        self._evaluation = evaluation_mode(self.trial)
        if not self.harness.models:
            raise ValueError(
                f"{type(self.trial).__name__}.__init__ wrapped no model; call context.wrap_model()"
            )

    def _build_callbacks(self) -> CallbackList:
        user = self.trial.build_callbacks()
        if not isinstance(user, dict):
            raise TypeError(
                f"build_callbacks() must return a dict of names to PyTorchCallbacks, got "
                f"{type(user).__name__}"
            )
        named = (
            list(self._core_callbacks)
            + list(user.items())
            + self._trainer_callbacks
            + name_callbacks(global_callbacks(), "global:")
        )
        return CallbackList(named, is_chief=self.dist.is_chief)

    def _build_loader(self, method: str) -> Any:
        loader = getattr(self.trial, method)()
        if isinstance(loader, DataLoader):
            return loader
        if self.harness.dataset_checks:
            raise NotADataLoaderError(
                f"{method}() must return a determined_lite.pytorch.DataLoader (so the harness can "
                f"shard, repeat and resume it), got {type(loader).__module__}."
                f"{type(loader).__qualname__}; otherwise you can disable this check by calling "
                "context.experimental.disable_dataset_reproducibility_checks() in __init__()"
            )
        if not hasattr(loader, "__iter__"):
            raise TypeError(f"{method}() returned {type(loader).__name__}, which is not iterable")
        return loader

    def _check_records_per_epoch(self) -> None:
        """``records_per_epoch`` given and unlike the training loader's records: one warning with
        both numbers (det-lite's epoch is one pass over the loader; Determined's was the config's)."""
        given, loader = self.harness.settings.records_per_epoch, self._train_loader
        if not given or not isinstance(loader, DataLoader) or loader.sharding.args.batch_sampler is not None:
            return
        records = loader.sharding.units_per_epoch()
        if records != given and self.dist.is_chief:
            logger.warning(
                "records_per_epoch is %d in the experiment config, but the training DataLoader holds "
                "%d records; det-lite's epoch is one pass over the DataLoader (%d records), so "
                "lengths in epochs follow the DataLoader",
                given,
                records,
                records,
            )

    def _epoch_length(self) -> int:
        loader = self._train_loader
        if isinstance(loader, DataLoader):
            return loader.sharding.epoch_length(self.dist.size)
        try:
            n = len(loader)
        except TypeError:
            raise TypeError(
                "the training data loader has no len(); det-lite needs the epoch length to schedule epochs"
            ) from None
        if n < 1:
            raise ValueError("the training data loader yields no batch")
        # Every worker uses the chief's epoch length, as in Determined: a sharded sampler's
        # len() may differ between ranks (det.pytorch.samplers.DistributedBatchSampler).
        return self.dist.broadcast(n) if self.dist.size > 1 else n

    def _training_batches(self, start: int) -> Iterator[Any]:
        loader = self._train_loader
        # Batches already on the device (a TensorDataset's there) skip to_device's walk.
        self._batches_on_device = isinstance(loader, DataLoader) and loader.sharding.batches_on(
            self.context.device
        )
        if isinstance(loader, DataLoader):
            return in_process_batches(
                loader.sharding.training_loader(
                    seed=self.harness.trial_seed,
                    rank=self.dist.rank,
                    num_replicas=self.dist.size,
                    start_batch=start,
                )
            )
        epoch_length = self.state.require_epoch_length()

        def repeat() -> Iterator[Any]:
            # A sampler with ``set_epoch`` (torch's DistributedSampler, det-lite's samplers) is
            # told each pass's epoch, so a resumed trial continues the same order.
            epoch, skip = divmod(start, epoch_length)
            while True:
                for obj in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
                    set_epoch(obj, epoch)
                yield from itertools.islice(loader, skip, None)
                epoch, skip = epoch + 1, 0

        return repeat()

    def _plan(self) -> Plan:
        spec = self.spec
        plan = Plan.build(
            max_length=spec.max_length,
            epoch_length=self.state.require_epoch_length(),
            aggregation_frequency=self.state.aggregation_frequency,
            global_batch_size=self.context.get_global_batch_size,
            validation_period=spec.validation_period,
            checkpoint_period=spec.checkpoint_period,
            reporting_period=spec.reporting_period,
            checkpoint_policy=CheckpointPolicy(spec.checkpoint_policy),
            test_mode=spec.test_mode,
        )
        if plan.max_batches != plan.requested_batches:
            logger.warning(
                "max_length is %d batches, not a multiple of aggregation_frequency=%d; "
                "training runs to batch %d so that the last optimizer step is complete",
                plan.requested_batches,
                plan.aggregation_frequency,
                plan.max_batches,
            )
        return plan

    # --- run --------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        self.callbacks = self.harness.callbacks = self._build_callbacks()
        self.callbacks.call(Hook.SETUP, self.context)
        forward_hooks = ForwardHooks(self.harness.models, self.callbacks)
        try:
            return self._run()
        finally:
            forward_hooks.remove()

    def _run(self) -> TrainResult:
        state, spec = self.state, self.spec
        # context.get_initial_batch(), known before the data loaders are built (as in Determined)
        state.initial_batch = resume_batches(spec.latest_checkpoint) if spec.latest_checkpoint else 0
        self._train_loader = self._build_loader("build_training_data_loader")
        self.validation = Validation(
            self.trial,
            self.context,
            self._build_loader("build_validation_data_loader"),
            check_evaluation_reducer(self.trial.evaluation_reducer()),
            self._evaluation,
            test_mode=spec.test_mode,
        )
        state.epoch_length = self._epoch_length()
        self._check_records_per_epoch()
        self.plan = state.plan = self._plan()
        self._last_validation: Optional[Tuple[int, Dict[str, Any]]] = None
        self._writer = CheckpointWriter(
            self.context,
            self.callbacks,
            self.plan,
            trial_class_spec(type(self.trial), spec.code_source),
            spec.checkpoint_root,
            spec.code_source,
            spec.trial_info,
        )
        restored = self._restore()
        state.batches_done = restored.start
        self.dist.broadcast_initial_state(self.harness.models, self.context.optimizers)

        self.callbacks.call(Hook.ON_TRIAL_STARTUP, restored.start, restored.checkpoint_uuid)
        try:
            self._train(restored.start, restored.rng_state)
        except BaseException:
            # A complete checkpoint still counts after an error (a restart resumes from it), but
            # announcing it must not hide the error itself.
            try:
                self._writer.on_disk()
            except Exception:
                logger.exception("could not finish the last checkpoint after the trial failed")
            raise
        else:
            self._writer.on_disk()
            self.callbacks.call(Hook.ON_TRAINING_END)
        finally:
            self._writer.close()
            self.callbacks.call(Hook.ON_TRIAL_SHUTDOWN)
        self.result.total_batches = state.batches_done
        return self.result

    def _restore(self) -> Restored:
        """Resume from the trial's latest checkpoint, or warm start, or start fresh."""
        restorer, spec = Restorer(self.harness, self.callbacks), self.spec
        if spec.latest_checkpoint:
            restored = restorer.resume(spec.latest_checkpoint)
        elif spec.warm_start:
            restored = restorer.warm_start(spec.warm_start)
        else:
            restored = Restored()
        if restored.best_validation_restored:
            self.result.best_validation = self.state.best_validation
        self._writer.last_batch = restored.checkpoint_batch
        return restored

    # --- train ------------------------------------------------------------------------------
    def _train(self, start: int, rng_state: Optional[Dict[str, Any]]) -> None:
        plan = self.plan
        batches = self._training_batches(start)
        for model in self.harness.models:
            model.train()
        self.callbacks.call(Hook.ON_TRAINING_START)
        if rng_state is not None:
            _rng.restore_rng_state(rng_state)
        self.harness.reset_reducers(training=True)
        self._chunk: List[Dict[str, Any]] = []

        if start == 0 and self.spec.step_zero_validation and not self.spec.test_mode:
            self._validate()
        if start >= plan.max_batches:
            logger.info("already trained %d of %d batches; nothing to do", start, plan.max_batches)
            return
        self._pending_checkpoint = False
        self._quiet_until = 0  # the next batch end decides (schedule.quiet_until)
        # An external stop (spec.should_stop, asked on the chief at reports) seen mid-window is kept until
        # the next optimizer-step boundary, where training stops.
        self._external_stop = False
        for batch_idx in itertools.count(start):
            self._train_batch(batch_idx, batches)
            if self._after_batch(batch_idx + 1) and not self._train_on(batch_idx + 1):
                break

    def _train_batch(self, batch_idx: int, batches: Iterator[Any]) -> None:
        """One training batch with its hooks, and its LR steps (window and epoch ends)."""
        harness, state, cbs = self.harness, self.state, self.callbacks
        epoch_len = self.plan.epoch_length
        epoch_idx = batch_idx // epoch_len
        state.batch_idx = batch_idx
        if batch_idx % epoch_len == 0:
            cbs.call(Hook.ON_TRAINING_EPOCH_START, epoch_idx)
        batch = next(batches)
        if harness.auto_to_device and not self._batches_on_device:
            batch = self.context.to_device(batch)
        cbs.call(Hook.ON_TRAIN_BATCH_START, batch, batch_idx)
        update = state.is_step_batch()
        with self._batch_context(update):
            out = self.trial.train_batch(batch, epoch_idx, batch_idx)
        metrics = self._check_training_output(out)
        if update:
            harness.precision.update()
            harness.lr.after_step_window(batch_idx, self.plan.aggregation_frequency, cbs)
        cbs.call(Hook.ON_TRAIN_BATCH_END, metrics, batch_idx)
        self._chunk.append(metrics)
        state.batches_done = done = batch_idx + 1
        if done % epoch_len == 0:
            harness.lr.after_epoch(done // epoch_len, cbs)
            cbs.call(Hook.ON_TRAINING_EPOCH_END, epoch_idx)

    def _after_batch(self, done: int) -> bool:
        """Report, validate and checkpoint as the plan says after ``done`` batches; True to stop.
        Before the plan's next event, with nothing pending or asked, there is nothing to decide."""
        plan, harness = self.plan, self.harness
        stop = harness.stop_requested or self._external_stop
        if done < self._quiet_until and not (stop or self._pending_checkpoint):
            return False
        self._quiet_until = quiet_until(plan, done)
        decision = decide(plan, done, checkpoint_pending=self._pending_checkpoint, stop=stop)
        if decision.report and self._flush_training(done) and not stop:
            stop = self._external_stop = True
        self._pending_checkpoint = decision.checkpoint_pending
        if decision.validate:
            improved = self._validate()
            self._pending_checkpoint = decision.checkpoint_after_validation(plan.checkpoint_policy, improved)
            # A stop asked for during validation (EarlyStopping in on_validation_end) stops
            # here, at the validated batch, with its checkpoint: no extra batch is trained.
            stop = stop or harness.stop_requested
        if decision.checkpoint_now(self._pending_checkpoint, stop):
            self._save_checkpoint(done)
            self._pending_checkpoint = False
        if decision.stop_now(stop):
            self.result.stopped_early = not decision.end
            return True
        return False

    def _train_on(self, done: int) -> bool:
        """At max_length: whether training goes on in this process to the longer length the chief
        was given (``spec.next_length``), exactly as a run resumed from this checkpoint would."""
        if self.spec.next_length is None or self.result.stopped_early:
            return False
        self._writer.on_disk()  # registered before the chief asks: a later run resumes from it
        length = None
        if self.dist.is_chief and not (self.harness.stop_requested or self._external_stop):
            last = self._last_validation
            metric = last[1].get(self.spec.searcher_metric or "") if last and last[0] == done else None
            length = self.spec.next_length(metric)
        length = self.dist.broadcast(length) if self.dist.size > 1 else length
        if length is None:
            return False
        self.spec = dataclasses.replace(self.spec, max_length=length)
        self.plan = self.state.plan = self._writer.plan = self._plan()
        self._quiet_until = 0
        return True

    def _batch_context(self, update: bool) -> ContextManager[Any]:
        """Autocast (AMP) and the engine's gradient communication (none off optimizer-step batches)."""
        precision = self.harness.precision
        sync = self.dist.batch_context(self.harness.models, update)
        if not precision.autocasts:
            return sync
        stack = contextlib.ExitStack()
        stack.enter_context(precision.autocast())
        stack.enter_context(sync)
        return stack

    # --- training metrics -------------------------------------------------------------------
    def _check_training_output(self, out: Any) -> Dict[str, Any]:
        if isinstance(out, torch.Tensor):
            return {"loss": out.detach()}
        if isinstance(out, dict):
            return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        raise OutputTypeError(
            f"{type(self.trial).__name__}.train_batch() must return a torch.Tensor (the loss) or a "
            f"dict of metric names to values, got {type(out).__name__}"
        )

    def _flush_training(self, done: int) -> bool:
        """Reduce the chunk of batches since the last report: each batch over the workers, then
        over the batches (``average_training_metrics: false``: the chief's own metrics).

        Returns the chief's answer to ``spec.should_stop`` (asked on the chief only), which rides
        in the same gather so that every rank stops at the same boundary.
        """
        self._writer.on_disk()
        if not self._chunk:
            return False
        reducers = self.harness.reducers_for(training=True)
        average = self.harness.settings.average_training_metrics
        partial = training_partial(self._chunk) if average or self.dist.is_chief else None
        vote = self.dist.is_chief and self.spec.should_stop is not None and bool(self.spec.should_stop())
        gathered = self.dist.allgather(
            {"metrics": partial, "reducers": [r.reducer.per_slot_reduce() for r in reducers], "stop": vote}
        )
        partials = [g["metrics"] for g in (gathered if average else gathered[:1])]
        report = training_cross_slot(partials, self._chunk)
        per_slot = [g["reducers"] for g in gathered]
        metrics = merge_reducer_metrics(report.metrics, reducers, per_slot, "training")
        self._chunk = []
        self.harness.reset_reducers(training=True)
        self.result.training_metrics.append({"total_batches": done, "metrics": plain_metrics(metrics)})
        self.callbacks.call(Hook.ON_TRAINING_WORKLOAD_END, metrics, report.batch_metrics)
        return bool(gathered[0]["stop"])

    # --- validation -------------------------------------------------------------------------
    def _validate(self) -> bool:
        """Run a validation; True when the searcher metric improved."""
        cbs, done = self.callbacks, self.state.batches_done
        cbs.call(Hook.ON_VALIDATION_START)
        cbs.call(Hook.ON_VALIDATION_STEP_START)
        metrics = self.validation.run()  # numpy values, for callbacks
        plain = plain_metrics(metrics)
        self._last_validation = (done, plain)
        self.result.validation_metrics.append({"total_batches": done, "metrics": plain})
        improved = self._track_best(metrics)
        cbs.call(Hook.ON_VALIDATION_END, metrics)
        cbs.call(Hook.ON_VALIDATION_STEP_END, metrics)
        return improved

    def _track_best(self, metrics: Dict[str, Any]) -> bool:
        name = self.spec.searcher_metric
        if name is None:
            return False
        if name not in metrics:
            raise MissingMetricError(
                f"searcher metric {name!r} is not among the validation metrics {sorted(metrics)}; "
                "fix searcher.metric or return it from evaluate_batch/evaluate_full_dataset"
            )
        value = metrics[name]
        if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
            raise MetricTypeError(f"searcher metric {name!r} must be a number, got {value!r}")
        value = float(value)
        if not is_better(value, self.state.best_validation, self.spec.smaller_is_better):
            return False
        self.state.best_validation = self.result.best_validation = value
        return True

    # --- checkpoints ------------------------------------------------------------------------
    def _save_checkpoint(self, done: int) -> None:
        if self._writer.last_batch == done:
            return
        last = self._last_validation
        metrics = last[1] if last and last[0] == done else None
        uuid, path = self._writer.save(done, metrics)
        self.result.checkpoints.append(
            {"uuid": uuid, "path": path, "total_batches": done, "metrics": metrics}
        )
