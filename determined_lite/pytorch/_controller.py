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
import os
import time
from typing import Any, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

import determined_lite
from determined_lite._errors import MetricTypeError, MissingMetricError, NotADataLoaderError
from determined_lite.config import (
    DEFAULT_SMALLER_IS_BETTER,
    CheckpointPolicy,
    TrainUnit,
)
from determined_lite.pytorch import _checkpoint, _determined_ckpt, _rng
from determined_lite.pytorch._callback import CallbackList, PyTorchCallback, global_callbacks, name_callbacks
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._fit_plan import FitPlan
from determined_lite.pytorch._forward_hooks import ForwardHooks
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._reducer import check_evaluation_reducer, merge_reducer_metrics, plain_metrics
from determined_lite.pytorch._schedule import Plan, decide, is_better
from determined_lite.pytorch._sharding import in_process_batches, set_epoch
from determined_lite.pytorch._training_metrics import training_cross_slot, training_partial
from determined_lite.pytorch._trial import PyTorchTrial
from determined_lite.pytorch._validation import Validation, evaluation_mode
from determined_lite.storage import STORE_KEY

logger = logging.getLogger("determined_lite")


@dataclasses.dataclass
class TrainResult:
    """What one ``fit`` did: reported metrics and the checkpoints it wrote."""

    total_batches: int = 0
    training_metrics: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    validation_metrics: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    checkpoints: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    best_validation: Optional[float] = None
    stopped_early: bool = False

    @property
    def latest_checkpoint(self) -> Optional[str]:
        return self.checkpoints[-1]["path"] if self.checkpoints else None


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
        self.result = TrainResult()
        self._core_callbacks = list(core_callbacks)
        self._trainer_callbacks = list(callbacks)  # Trainer(callbacks=) and fit(callbacks=), named
        self._flush = _checkpoint.BackgroundFlush()
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
                f"{type(loader).__qualname__}; to use it anyway call "
                "context.experimental.disable_dataset_reproducibility_checks() in __init__"
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
        self.callbacks.call("setup", self.context)
        forward_hooks = ForwardHooks(self.harness.models, self.callbacks)
        try:
            return self._run()
        finally:
            forward_hooks.remove()

    def _run(self) -> TrainResult:
        harness, state, spec = self.harness, self.state, self.spec
        # context.get_initial_batch(), known before the data loaders are built (as in Determined)
        resume = spec.latest_checkpoint
        state.initial_batch = _resume_batches(resume) if resume else 0
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
        self._last_checkpoint_batch: Optional[int] = None

        checkpoint_uuid, rng_state = None, None
        start = 0
        if spec.latest_checkpoint:
            start, checkpoint_uuid, rng_state = self._restore(spec.latest_checkpoint)
        elif spec.warm_start:
            checkpoint_uuid, rng_state = self._warm_start(spec.warm_start)
        state.batches_done = start
        self.dist.broadcast_initial_state(harness.models, self.context.optimizers)

        self.callbacks.call("on_trial_startup", start, checkpoint_uuid)
        try:
            self._train(start, rng_state)
        except BaseException:
            # A complete checkpoint still counts after an error (a restart resumes from it), but
            # announcing it must not hide the error itself.
            try:
                self._checkpoint_on_disk()
            except Exception:
                logger.exception("could not finish the last checkpoint after the trial failed")
            raise
        else:
            self._checkpoint_on_disk()
            self.callbacks.call("on_training_end")
        finally:
            self._flush.close()
            self.callbacks.call("on_trial_shutdown")
        self.result.total_batches = state.batches_done
        return self.result

    def _train(self, start: int, rng_state: Optional[Dict[str, Any]]) -> None:
        harness, state, plan = self.harness, self.state, self.plan
        trial, cbs = self.trial, self.callbacks
        batches = self._training_batches(start)
        for model in harness.models:
            model.train()
        cbs.call("on_training_start")
        if rng_state is not None:
            _rng.restore_rng_state(rng_state)
        self.harness.reset_reducers(training=True)
        self._chunk: List[Dict[str, Any]] = []

        if start == 0 and self.spec.step_zero_validation and not self.spec.test_mode:
            self._validate()
        if start >= plan.max_batches:
            logger.info("already trained %d of %d batches; nothing to do", start, plan.max_batches)
            return

        k, epoch_len = plan.aggregation_frequency, plan.epoch_length
        auto_to_device = harness.auto_to_device
        pending_checkpoint = False
        # An external stop (spec.should_stop, asked on the chief at reports) seen mid-window is kept until
        # the next optimizer-step boundary, where training stops.
        external_stop = False
        for batch_idx in itertools.count(start):
            epoch_idx = batch_idx // epoch_len
            state.batch_idx = batch_idx
            if batch_idx % epoch_len == 0:
                cbs.call("on_training_epoch_start", epoch_idx)
            batch = next(batches)
            if auto_to_device:
                batch = self.context.to_device(batch)
            cbs.call("on_train_batch_start", batch, batch_idx)
            update = state.is_step_batch()
            with self._batch_context(update):
                out = trial.train_batch(batch, epoch_idx, batch_idx)
            metrics = self._check_training_output(out)
            if update:
                harness.precision.update()
                harness.lr.after_step_window(batch_idx, k, cbs)
            cbs.call("on_train_batch_end", metrics, batch_idx)
            self._chunk.append(metrics)

            done = batch_idx + 1
            state.batches_done = done
            if done % epoch_len == 0:
                harness.lr.after_epoch(done // epoch_len, cbs)
                cbs.call("on_training_epoch_end", epoch_idx)

            stop = harness.stop_requested or external_stop
            decision = decide(plan, done, checkpoint_pending=pending_checkpoint, stop=stop)
            if decision.report and self._flush_training(done) and not stop:
                stop = external_stop = True
            pending_checkpoint = decision.checkpoint_pending
            if decision.validate:
                improved = self._validate()
                pending_checkpoint = decision.checkpoint_after_validation(plan.checkpoint_policy, improved)
                # A stop asked for during validation (EarlyStopping in on_validation_end) stops
                # here, at the validated batch, with its checkpoint: no extra batch is trained.
                stop = stop or harness.stop_requested
            if decision.checkpoint_now(pending_checkpoint, stop):
                self._save_checkpoint(done)
                pending_checkpoint = False
            if decision.stop_now(stop):
                self.result.stopped_early = not decision.end
                break

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
        raise TypeError(
            f"{type(self.trial).__name__}.train_batch() must return a torch.Tensor (the loss) or a "
            f"dict of metric names to values, got {type(out).__name__}"
        )

    def _flush_training(self, done: int) -> bool:
        """Reduce the chunk of batches since the last report: each batch over the workers, then
        over the batches (``average_training_metrics: false``: the chief's own metrics).

        Returns the chief's answer to ``spec.should_stop`` (asked on the chief only), which rides
        in the same gather so that every rank stops at the same boundary.
        """
        self._checkpoint_on_disk()
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
        self.callbacks.call("on_training_workload_end", metrics, report.batch_metrics)
        return bool(gathered[0]["stop"])

    # --- validation -------------------------------------------------------------------------
    def _validate(self) -> bool:
        """Run a validation; True when the searcher metric improved."""
        cbs, done = self.callbacks, self.state.batches_done
        cbs.call("on_validation_start")
        cbs.call("on_validation_step_start")
        metrics = self.validation.run()  # numpy values, for callbacks
        plain = plain_metrics(metrics)
        self._last_validation = (done, plain)
        self.result.validation_metrics.append({"total_batches": done, "metrics": plain})
        improved = self._track_best(metrics)
        cbs.call("on_validation_end", metrics)
        cbs.call("on_validation_step_end", metrics)
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
    def _checkpoint_on_disk(self) -> None:
        """Wait for the last checkpoint's background flush, then announce it (chief only)."""
        checkpoint_uuid = self._flush.wait()
        if checkpoint_uuid is not None:
            self.callbacks.call("on_checkpoint_upload_end", checkpoint_uuid)

    def _save_checkpoint(self, done: int) -> None:
        if self._last_checkpoint_batch == done:
            return
        self._checkpoint_on_disk()
        ctx, harness = self.context, self.harness
        state = {
            "context": harness.state_dict(),
            "callbacks": self.callbacks.state_dict(),
            "rng": self.dist.allgather(_rng.capture_rng_state()),
            "trainer": {
                "total_batches": done,
                "trial_seed": harness.trial_seed,
                "best_validation": self.state.best_validation,
                "world_size": self.dist.size,
            },
        }
        last = self._last_validation
        metrics = last[1] if last and last[0] == done else None
        path = uuid = None
        if self.dist.is_chief:
            self.callbacks.call("on_checkpoint_save_start", state)
            info = self.spec.trial_info or self.harness.trial_info  # a plain-Python run's local record's
            metadata = {
                "trial_id": info.trial_id,
                "experiment_id": info.experiment_id,
                "total_batches": done,
                "epochs": done / self.plan.epoch_length,
                "framework": f"torch-{torch.__version__}",
                "determined_lite_version": determined_lite.__version__,
                "hparams": ctx.get_hparams(),
                "experiment_config": ctx.get_experiment_config(),
                "trial_class": f"{type(self.trial).__module__}:{type(self.trial).__qualname__}",
                "trial_seed": harness.trial_seed,
                "aggregation_frequency": self.plan.aggregation_frequency,
                "validation_metrics": metrics,
                "created": time.time(),
                STORE_KEY: info.store_path,
            }
            # Written complete and renamed into place now; flushed to disk while training goes on,
            # and announced with on_checkpoint_upload_end at the next report, checkpoint or end.
            uuid, path = _checkpoint.write_checkpoint(
                self.spec.checkpoint_root, state, metadata, self.spec.code_source, durable=False
            )
            self.callbacks.call("on_checkpoint_write_end", path)
            self.callbacks.call("on_checkpoint_end", path)
            self._flush.start(uuid, path)
        uuid, path = self.dist.broadcast((uuid, path)) if self.dist.size > 1 else (uuid, path)
        self._last_checkpoint_batch = done
        self.result.checkpoints.append(
            {"uuid": uuid, "path": path, "total_batches": done, "metrics": metrics}
        )

    def _restore(self, path: str) -> Tuple[int, str, Optional[Dict[str, Any]]]:
        self.callbacks.call("on_before_load_checkpoint", path)
        if _determined_ckpt.is_determined_checkpoint(path):
            return self._load_determined(path, warm=False)
        state, metadata = _checkpoint.read_checkpoint(path, map_location="cpu")
        self.callbacks.call("on_checkpoint_load_start", state)
        self.harness.load_state_dict(state["context"])
        self.callbacks.load_state_dict(state.get("callbacks", {}))
        trainer = state["trainer"]
        self.harness.trial_seed = trainer["trial_seed"]
        self.state.best_validation = self.result.best_validation = trainer.get("best_validation")
        rng = state["rng"]
        start = trainer["total_batches"]
        self._last_checkpoint_batch = start
        logger.info("resuming from checkpoint %s at batch %d", path, start)
        return (
            start,
            metadata.get("uuid", os.path.basename(os.path.normpath(path))),
            rng[self.dist.rank % len(rng)],
        )

    def _warm_start(self, path: str) -> Tuple[str, Optional[Dict[str, Any]]]:
        """Start a new trial from ``path`` as Determined's warm start does (the source checkpoint
        is loaded like the trial's own latest one, with the trial's progress at batch 0): weights,
        optimizer, LR scheduler and scaler states, callbacks' states and random states."""
        self.callbacks.call("on_before_load_checkpoint", path)
        if _determined_ckpt.is_determined_checkpoint(path):
            _, checkpoint_uuid, rng = self._load_determined(path, warm=True)
            return checkpoint_uuid, rng
        state, metadata = _checkpoint.read_checkpoint(path, map_location="cpu")
        self.callbacks.call("on_checkpoint_load_start", state)
        self.harness.load_state_dict(state["context"])
        for wrapped in self.harness.optimizers:
            wrapped.steps = 0  # the new trial counts its own optimizer steps
        self.callbacks.load_state_dict(state.get("callbacks", {}))
        rng = state["rng"]
        logger.info("warm start from checkpoint %s", path)
        return metadata.get("uuid", os.path.basename(os.path.normpath(path))), rng[self.dist.rank % len(rng)]

    def _load_determined(self, path: str, warm: bool) -> Tuple[int, str, Optional[Dict[str, Any]]]:
        """Load a checkpoint written by Determined (``_determined_ckpt``); resuming continues at
        its ``batches_trained``, a warm start at batch 0."""
        ckpt = _determined_ckpt.read_determined_checkpoint(path)
        self.callbacks.call("on_checkpoint_load_start", ckpt.state)
        harness = self.harness
        start = 0 if warm else ckpt.batches_trained
        self.harness.load_state_dict(
            _determined_ckpt.context_state(
                ckpt,
                models=len(harness.models),
                optimizers=len(harness.optimizers),
                lr_schedulers=len(harness.lr_schedulers),
                scalers=len(harness.precision.scalers),
                amp_scaler=harness.precision.amp_scaler is not None,
                optimizer_steps=start // self.state.aggregation_frequency,
            )
        )
        self.callbacks.load_state_dict(ckpt.state.get("callbacks") or {})
        self._last_checkpoint_batch = None if warm else start
        logger.info(
            "%s Determined checkpoint %s%s",
            "warm start from" if warm else "resuming from",
            path,
            "" if warm else f" at batch {start}",
        )
        return start, ckpt.uuid, _determined_ckpt.rng_state(ckpt)


def _resume_batches(path: str) -> int:
    """Batches trained in the checkpoint at ``path`` (det-lite's or Determined's)."""
    if _determined_ckpt.is_determined_checkpoint(path):
        return _determined_ckpt.batches_trained(path)
    return _checkpoint.checkpoint_batches(path)
