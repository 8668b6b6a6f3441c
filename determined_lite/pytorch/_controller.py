"""THE training loop: one loop for one process or many, hooks dispatched from one place.

Distribution lives in ``context.distributed``: this file calls its collectives and gradient
hooks and never branches on the backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import logging
import os
import time
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

import determined_lite
from determined_lite.config.units import Batch, Record, TrainUnit
from determined_lite.pytorch import _checkpoint
from determined_lite.pytorch._callback import CallbackList, PyTorchCallback, global_callbacks
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._sharding import set_epoch
from determined_lite.pytorch._lr_scheduler import LRScheduler
from determined_lite.pytorch._reducer import (
    LazyMetricList,
    check_evaluation_reducer,
    merge_reducer_metrics,
    to_json_metric,
    training_cross_slot,
    training_partial,
    validation_cross_slot,
    validation_partial,
)
from determined_lite.pytorch._trial import PyTorchTrial

logger = logging.getLogger("determined_lite")

CHECKPOINT_POLICIES = ("best", "all", "none")


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


@dataclasses.dataclass
class RunSpec:
    """How long to train and when to report, validate and checkpoint."""

    max_length: TrainUnit
    validation_period: Optional[TrainUnit] = None
    checkpoint_period: Optional[TrainUnit] = None
    reporting_period: TrainUnit = dataclasses.field(default_factory=lambda: Batch(100))
    checkpoint_policy: str = "best"
    latest_checkpoint: Optional[str] = None
    step_zero_validation: bool = False
    test_mode: bool = False
    checkpoint_root: str = ""
    code_source: Optional[str] = None
    searcher_metric: Optional[str] = None
    smaller_is_better: bool = True
    should_stop: Optional[Callable[[], bool]] = None

    def __post_init__(self) -> None:
        if self.checkpoint_policy not in CHECKPOINT_POLICIES:
            raise ValueError(
                f"checkpoint_policy must be one of {CHECKPOINT_POLICIES}, got {self.checkpoint_policy!r}"
            )
        for field in ("max_length", "validation_period", "checkpoint_period", "reporting_period"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, TrainUnit):
                raise TypeError(
                    f"{field} must be determined_lite.pytorch.Batch(n) or Epoch(n), got {value!r}"
                )


def _overrides(trial: PyTorchTrial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(PyTorchTrial, name)


def _takes_batch_idx(method: Callable[..., Any]) -> bool:
    """Whether ``evaluate_batch`` has Determined's newer ``(batch, batch_idx)`` signature."""
    params = [
        p
        for p in inspect.signature(method).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(params) >= 2


class TrialController:
    """Runs one trial on one worker: train, report, validate, checkpoint, resume."""

    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        spec: RunSpec,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
    ) -> None:
        self.trial = trial
        self.context = context
        self.spec = spec
        self.dist = context.distributed
        self.result = TrainResult()
        self._core_callbacks = list(core_callbacks)
        self._flush = _checkpoint.BackgroundFlush()
        self._check_trial()

    # --- setup ------------------------------------------------------------------------------
    def _check_trial(self) -> None:
        if not isinstance(self.trial, PyTorchTrial):
            raise TypeError(
                f"Trainer needs a determined_lite.pytorch.PyTorchTrial, got {type(self.trial).__name__}"
            )
        batch, full = (
            _overrides(self.trial, "evaluate_batch"),
            _overrides(self.trial, "evaluate_full_dataset"),
        )
        if batch == full:
            which = "both" if batch else "neither"
            raise TypeError(
                f"{type(self.trial).__name__} must override exactly one of evaluate_batch() and "
                f"evaluate_full_dataset(); it overrides {which}"
            )
        self._full_dataset = full
        self._eval_takes_idx = (not full) and _takes_batch_idx(self.trial.evaluate_batch)
        if not self.context.models:
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
        named = list(self._core_callbacks) + list(user.items())
        seen: Dict[str, int] = {}
        for cb in global_callbacks():
            base = f"global:{type(cb).__qualname__}"
            seen[base] = seen.get(base, 0) + 1
            named.append((base if seen[base] == 1 else f"{base}#{seen[base]}", cb))
        return CallbackList(named, is_chief=self.dist.is_chief)

    def _build_loader(self, method: str) -> Any:
        loader = getattr(self.trial, method)()
        if isinstance(loader, DataLoader):
            return loader
        if self.context._dataset_checks:
            raise TypeError(
                f"{method}() must return a determined_lite.pytorch.DataLoader (so the harness can "
                f"shard, repeat and resume it), got {type(loader).__module__}."
                f"{type(loader).__qualname__}; to use it anyway call "
                "context.experimental.disable_dataset_reproducibility_checks() in __init__"
            )
        if not hasattr(loader, "__iter__"):
            raise TypeError(f"{method}() returned {type(loader).__name__}, which is not iterable")
        return loader

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
        return n

    def _training_batches(self, start: int) -> Iterator[Any]:
        loader = self._train_loader
        if isinstance(loader, DataLoader):
            return iter(
                loader.sharding.training_loader(
                    seed=self.context.get_trial_seed(),
                    rank=self.dist.rank,
                    num_replicas=self.dist.size,
                    start_batch=start,
                )
            )

        def repeat() -> Iterator[Any]:
            # A sampler with ``set_epoch`` (torch's DistributedSampler, det-lite's samplers) is
            # told each pass's epoch, so a resumed trial continues the same order.
            epoch, skip = divmod(start, self._epoch_len)
            while True:
                for obj in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
                    set_epoch(obj, epoch)
                yield from itertools.islice(loader, skip, None)
                epoch, skip = epoch + 1, 0

        return repeat()

    def _interval(self, unit: Optional[TrainUnit]) -> Optional[int]:
        if unit is None:
            return None
        return max(1, self._to_batches(unit))

    def _to_batches(self, unit: TrainUnit) -> int:
        gbs = self.context.get_global_batch_size() if isinstance(unit, Record) else 0
        return unit.to_batches(self._epoch_len, gbs)

    # --- run --------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        ctx, spec = self.context, self.spec
        self.callbacks = ctx._callbacks = self._build_callbacks()
        self._train_loader = self._build_loader("build_training_data_loader")
        self._val_loader = self._build_loader("build_validation_data_loader")
        self._reducer_kinds = check_evaluation_reducer(self.trial.evaluation_reducer())
        self._epoch_len = ctx._epoch_len = self._epoch_length()

        k = ctx._aggregation_frequency
        if spec.test_mode:
            self._max_batches = k
        else:
            requested = self._to_batches(spec.max_length)
            self._max_batches = -(-requested // k) * k
            if self._max_batches != requested:
                logger.warning(
                    "max_length is %d batches, not a multiple of aggregation_frequency=%d; "
                    "training runs to batch %d so that the last optimizer step is complete",
                    requested,
                    k,
                    self._max_batches,
                )
        self._val_every = None if spec.test_mode else self._interval(spec.validation_period)
        self._ckpt_every = None if spec.test_mode else self._interval(spec.checkpoint_period)
        self._report_every = self._interval(spec.reporting_period)
        self._best: Optional[float] = None
        self._last_validation: Optional[Tuple[int, Dict[str, Any]]] = None
        self._last_checkpoint_batch: Optional[int] = None

        checkpoint_uuid, rng_state = None, None
        start = 0
        if spec.latest_checkpoint:
            start, checkpoint_uuid, rng_state = self._restore(spec.latest_checkpoint)
        self.result.total_batches = start
        self.dist.broadcast_initial_state(ctx.models, ctx.optimizers)

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
        finally:
            self._flush.close()
            self.callbacks.call("on_trial_shutdown")
        return self.result

    def _train(self, start: int, rng_state: Optional[Dict[str, Any]]) -> None:
        ctx, trial, cbs = self.context, self.trial, self.callbacks
        batches = self._training_batches(start)
        for model in ctx.models:
            model.train()
        cbs.call("on_training_start")
        if rng_state is not None:
            _checkpoint.restore_rng_state(rng_state)
        ctx._training = True
        self._reset_reducers(training=True)
        self._chunk: List[Dict[str, Any]] = []

        if start == 0 and self.spec.step_zero_validation and not self.spec.test_mode:
            self._validate()
        if start >= self._max_batches:
            logger.info("already trained %d of %d batches; nothing to do", start, self._max_batches)
            return

        k = ctx._aggregation_frequency
        epoch_len = self._epoch_len
        auto_to_device = ctx._auto_to_device
        every_batch = _schedulers(ctx, LRScheduler.StepMode.STEP_EVERY_BATCH)
        every_epoch = _schedulers(ctx, LRScheduler.StepMode.STEP_EVERY_EPOCH)
        pending_checkpoint = False
        # An external stop (spec.should_stop, asked on the chief at reports) seen mid-window is kept until
        # the next optimizer-step boundary, where training stops.
        external_stop = False
        for batch_idx in itertools.count(start):
            epoch_idx = batch_idx // epoch_len
            ctx._batch_idx = batch_idx
            if batch_idx % epoch_len == 0:
                cbs.call("on_training_epoch_start", epoch_idx)
            batch = next(batches)
            if auto_to_device:
                batch = ctx.to_device(batch)
            cbs.call("on_train_batch_start", batch, batch_idx)
            update = (batch_idx + 1) % k == 0
            with self._batch_context(update):
                out = trial.train_batch(batch, epoch_idx, batch_idx)
            metrics = self._check_training_output(out)
            if update:
                ctx._update_scalers()
                # STEP_EVERY_BATCH: the scheduler steps due on the k batches of this window are
                # taken after its optimizer step, as in Determined ("never step the LR when the
                # optimizer does not step"): stepping mid-window would decay the LR before the
                # window's optimizer step and skip the schedule's first values. k = 1: per batch.
                for sched in every_batch:
                    for i in range(batch_idx - k + 1, batch_idx + 1):
                        if (i + 1) % sched.frequency == 0:
                            ctx._step_scheduler(sched)
            cbs.call("on_train_batch_end", metrics, batch_idx)
            self._chunk.append(metrics)

            done = batch_idx + 1
            self.result.total_batches = done
            if done % epoch_len == 0:
                for sched in every_epoch:
                    if (done // epoch_len) % sched.frequency == 0:
                        ctx._step_scheduler(sched)
                cbs.call("on_training_epoch_end", epoch_idx)

            end = done >= self._max_batches
            boundary = done % k == 0
            validate = end or _due(done, self._val_every)
            pending_checkpoint = pending_checkpoint or _due(done, self._ckpt_every)
            report = validate or (pending_checkpoint and boundary) or _due(done, self._report_every)
            stop = ctx._stop_requested or external_stop
            if report or (stop and boundary):
                if self._flush_training(done) and not stop:
                    stop = external_stop = True
            if validate:
                if self._validate() and self.spec.checkpoint_policy != "none":
                    pending_checkpoint = True
                elif self.spec.checkpoint_policy == "all":
                    pending_checkpoint = True
            if boundary and (pending_checkpoint or end or stop):
                self._save_checkpoint(done)
                pending_checkpoint = False
            if end or (stop and boundary):
                self.result.stopped_early = not end
                break
        ctx._training = False

    def _batch_context(self, update: bool) -> ContextManager[Any]:
        """Autocast (AMP) and, off optimizer-step batches, no gradient communication."""
        ctx = self.context
        if not ctx._use_amp:
            return _NULL if update else self.dist.no_sync(ctx.models)
        stack = contextlib.ExitStack()
        stack.enter_context(ctx._autocast())
        if not update:
            stack.enter_context(self.dist.no_sync(ctx.models))
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

    def _reset_reducers(self, training: bool) -> None:
        for r in self.context._reducers:
            if r.for_training if training else r.for_validation:
                r.reducer.reset()

    def _flush_training(self, done: int) -> bool:
        """Reduce the chunk of batches since the last report, across batches then workers.

        Returns the chief's answer to ``spec.should_stop`` (asked on the chief only), which rides
        in the same gather so that every rank stops at the same boundary.
        """
        self._checkpoint_on_disk()
        if not self._chunk:
            return False
        reducers = [r for r in self.context._reducers if r.for_training]
        partial = training_partial(self._chunk)
        vote = self.dist.is_chief and self.spec.should_stop is not None and bool(self.spec.should_stop())
        gathered = self.dist.allgather(
            {"metrics": partial, "reducers": [r.reducer.per_slot_reduce() for r in reducers], "stop": vote}
        )
        metrics = training_cross_slot([g["metrics"] for g in gathered])
        metrics = merge_reducer_metrics(metrics, reducers, [g["reducers"] for g in gathered], "training")
        batch_metrics = LazyMetricList(self._chunk, "training")
        self._chunk = []
        self._reset_reducers(training=True)
        self.result.training_metrics.append({"total_batches": done, "metrics": metrics})
        self.callbacks.call("on_training_workload_end", metrics, batch_metrics)
        return bool(gathered[0]["stop"])

    # --- validation -------------------------------------------------------------------------
    def _validate(self) -> bool:
        """Run a validation; True when the searcher metric improved."""
        ctx, cbs, done = self.context, self.callbacks, self.result.total_batches
        cbs.call("on_validation_start")
        cbs.call("on_validation_step_start")
        self._reset_reducers(training=False)
        modes = [m.training for m in ctx.models]
        for m in ctx.models:
            m.eval()
        # Validation never moves the training RNG streams: how often a trial validates (or
        # validating at the end of a run that is resumed later) cannot change training.
        rng = _checkpoint.capture_rng_state()
        try:
            with torch.no_grad(), ctx._autocast():
                metrics = self._evaluate_full() if self._full_dataset else self._evaluate_batches()
        finally:
            _checkpoint.restore_rng_state(rng)
            for m, mode in zip(ctx.models, modes):
                m.train(mode)
        # Training resumes with a fresh chunk: a reducer used for both workloads must not carry
        # the values of this validation into it.
        self._reset_reducers(training=True)
        self._last_validation = (done, metrics)
        self.result.validation_metrics.append({"total_batches": done, "metrics": metrics})
        improved = self._track_best(metrics)
        cbs.call("on_validation_end", metrics)
        cbs.call("on_validation_step_end", metrics)
        return improved

    def _evaluate_batches(self) -> Dict[str, Any]:
        ctx, cbs, trial = self.context, self.callbacks, self.trial
        loader = self._val_loader
        if isinstance(loader, DataLoader):
            loader = loader.sharding.validation_loader(
                rank=self.dist.rank, num_replicas=self.dist.size, seed=ctx.get_trial_seed()
            )
        limit = 1 if self.spec.test_mode else None
        outputs: List[Dict[str, Any]] = []
        lengths: List[int] = []
        cbs.call("on_validation_epoch_start")
        for idx, batch in enumerate(loader):
            if limit is not None and idx >= limit:
                break
            lengths.append(trial.get_batch_length(batch))
            if ctx._auto_to_device:
                batch = ctx.to_device(batch)
            cbs.call("on_validation_batch_start", batch, idx)
            out = trial.evaluate_batch(batch, idx) if self._eval_takes_idx else trial.evaluate_batch(batch)
            if not isinstance(out, dict):
                raise TypeError(
                    f"{type(trial).__name__}.evaluate_batch() must return a dict of metric names "
                    f"to values, got {type(out).__name__}"
                )
            cbs.call("on_validation_batch_end", out, idx)
            outputs.append(out)
        cbs.call("on_validation_epoch_end", outputs)
        reducers = [r for r in ctx._reducers if r.for_validation]
        partial = validation_partial(outputs, lengths, self._reducer_kinds)
        gathered = self.dist.allgather(
            {"metrics": partial, "reducers": [r.reducer.per_slot_reduce() for r in reducers]}
        )
        metrics = validation_cross_slot([g["metrics"] for g in gathered])
        return merge_reducer_metrics(metrics, reducers, [g["reducers"] for g in gathered], "validation")

    def _evaluate_full(self) -> Dict[str, Any]:
        """Chief evaluates the whole set; every rank receives the result (or the chief's error)."""
        outcome: Tuple[bool, Any] = (True, {})
        if self.dist.is_chief:
            try:
                loader = self._val_loader
                if isinstance(loader, DataLoader):
                    loader = loader.sharding.validation_loader(
                        rank=0, num_replicas=1, seed=self.context.get_trial_seed()
                    )
                metrics = self.trial.evaluate_full_dataset(loader)
                if not isinstance(metrics, dict):
                    raise TypeError(
                        f"{type(self.trial).__name__}.evaluate_full_dataset() must return a dict "
                        f"of metric names to values, got {type(metrics).__name__}"
                    )
                metrics = {n: to_json_metric(v, n, "validation") for n, v in metrics.items()}
                reducers = [r for r in self.context._reducers if r.for_validation]
                metrics = merge_reducer_metrics(
                    metrics, reducers, [[r.reducer.per_slot_reduce() for r in reducers]], "validation"
                )
                outcome = (True, metrics)
            except Exception as e:
                if self.dist.size == 1:
                    raise
                outcome = (False, e)
        ok, payload = self.dist.broadcast(outcome) if self.dist.size > 1 else outcome
        if not ok:
            if self.dist.is_chief:
                raise payload
            raise RuntimeError(f"evaluate_full_dataset() failed on the chief: {payload!r}")
        return payload

    def _track_best(self, metrics: Dict[str, Any]) -> bool:
        name = self.spec.searcher_metric
        if name is None:
            return False
        if name not in metrics:
            raise KeyError(
                f"searcher metric {name!r} is not among the validation metrics {sorted(metrics)}; "
                "fix searcher.metric or return it from evaluate_batch/evaluate_full_dataset"
            )
        value = metrics[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"searcher metric {name!r} must be a number, got {value!r}")
        better = self._best is None or (
            value < self._best if self.spec.smaller_is_better else value > self._best
        )
        if better:
            self._best = float(value)
            self.result.best_validation = self._best
        return better

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
        ctx = self.context
        state = {
            "context": ctx._state_dict(),
            "callbacks": self.callbacks.state_dict(),
            "rng": self.dist.allgather(_checkpoint.capture_rng_state()),
            "trainer": {
                "total_batches": done,
                "trial_seed": ctx.get_trial_seed(),
                "best_validation": self._best,
                "world_size": self.dist.size,
            },
        }
        metrics = (
            self._last_validation[1] if self._last_validation and self._last_validation[0] == done else None
        )
        path = uuid = None
        if self.dist.is_chief:
            self.callbacks.call("on_checkpoint_save_start", state)
            metadata = {
                "trial_id": ctx.get_trial_id(),
                "experiment_id": ctx.get_experiment_id(),
                "total_batches": done,
                "epochs": done / self._epoch_len,
                "framework": f"torch-{torch.__version__}",
                "determined_lite_version": determined_lite.__version__,
                "hparams": ctx.get_hparams(),
                "experiment_config": ctx.get_experiment_config(),
                "trial_class": f"{type(self.trial).__module__}:{type(self.trial).__qualname__}",
                "trial_seed": ctx.get_trial_seed(),
                "aggregation_frequency": ctx._aggregation_frequency,
                "validation_metrics": metrics,
                "created": time.time(),
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

    def _restore(self, path: str) -> Tuple[int, str, Dict[str, Any]]:
        state, metadata = _checkpoint.read_checkpoint(path, map_location="cpu")
        self.callbacks.call("on_checkpoint_load_start", state)
        self.context._load_state_dict(state["context"])
        self.callbacks.load_state_dict(state.get("callbacks", {}))
        trainer = state["trainer"]
        self.context._trial_seed = trainer["trial_seed"]
        self._best = trainer.get("best_validation")
        self.result.best_validation = self._best
        rng = state["rng"]
        start = trainer["total_batches"]
        self._last_checkpoint_batch = start
        logger.info("resuming from checkpoint %s at batch %d", path, start)
        return (
            start,
            metadata.get("uuid", os.path.basename(os.path.normpath(path))),
            rng[self.dist.rank % len(rng)],
        )


_NULL = contextlib.nullcontext()  # reusable: nullcontext keeps no state


def _schedulers(ctx: PyTorchTrialContext, mode: LRScheduler.StepMode) -> List[LRScheduler]:
    return [s for s in ctx.lr_schedulers if s.step_mode is mode]


def _due(done: int, every: Optional[int]) -> bool:
    return every is not None and done % every == 0
