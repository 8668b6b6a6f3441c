"""Run a trial from plain Python: ``init()`` builds the context, ``Trainer.fit()`` trains.

A plain-Python run (no experiment ids in its ``TrialInfo``) shows a progress bar and one line
per report on stdout (``progress=False`` or ``$DET_LITE_PROGRESS=0``: quiet) and is recorded
in the store as a ``local`` experiment (``reporting/_local.py``), so its checkpoints are listed
and kept by the retention policy like any experiment's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import random
import sys
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from determined_lite import tensorboard
from determined_lite.config import (
    DEFAULT_REPORTING_PERIOD,
    CheckpointPolicy,
    CompileSettings,
    TrainingSettings,
    TrainUnit,
)
from determined_lite.distributed import DistributedContext
from determined_lite.pytorch._callback import Callbacks, PyTorchCallback, name_callbacks
from determined_lite.pytorch._callback_modules import import_callback_modules
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._controller import RunSpec, TrainResult, TrialController
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._progress import (
    LOCAL_INTERVAL_S,
    ProgressDisplay,
    ProgressMeter,
    progress_by_default,
)
from determined_lite.pytorch._reporting import MetricLogger, TensorBoardMetrics
from determined_lite.pytorch._rng import seed_everything
from determined_lite.pytorch._trial import PyTorchTrial
from determined_lite.runtime._cluster import active_trial
from determined_lite.store._paths import checkpoint_root

logger = logging.getLogger("determined_lite")


@contextlib.contextmanager
def init(
    *,
    hparams: Optional[Dict[str, Any]] = None,
    exp_conf: Optional[Dict[str, Any]] = None,
    distributed: Optional[DistributedContext] = None,
    aggregation_frequency: Optional[int] = None,
    enable_tensorboard_logging: bool = True,
    trial_info: Optional[TrialInfo] = None,
    compile: Union[None, bool, Mapping[str, Any], CompileSettings] = None,  # noqa: A002
) -> Iterator[PyTorchTrialContext]:
    """Create the context of one trial; seeds python, numpy and torch before the trial is built.

    The trial seed is ``trial_info.trial_seed``, else ``reproducibility.experiment_seed`` of
    ``exp_conf``, else a random one (logged, and saved in checkpoints).
    ``aggregation_frequency`` defaults to ``optimizations.aggregation_frequency``, else 1.
    ``compile`` (det-lite's): ``True``, or the fields of ``optimizations.compile`` as a dict
    (``{"backend": "aot_eager", "retrace_every_iteration": True}``), replaces that section of
    ``exp_conf``: ``wrap_model`` then compiles the trial's models (``torch.compile``).
    In a script that det-lite runs (``det.get_cluster_info()`` is set), what is not given comes
    from the trial: its hyperparameters, config, distributed context and identity.
    """
    script = active_trial()
    if script is not None and trial_info is None:
        # A script run by det-lite (Determined's on-cluster init): the trial's own values.
        hparams = script.spec.hparams if hparams is None else hparams
        exp_conf = script.spec.exp_conf if exp_conf is None else exp_conf
        distributed = distributed or script.distributed
        trial_info = script.trial_info()
    exp_conf = dict(exp_conf or {})
    if compile is not None:
        chosen = CompileSettings.from_value(compile, "init(compile=...)")
        if compile is not False and not (isinstance(compile, Mapping) and "enabled" in compile):
            chosen = dataclasses.replace(chosen, enabled=True)  # asking for options means "on"
        exp_conf["optimizations"] = {**(exp_conf.get("optimizations") or {}), "compile": chosen.to_json()}
    settings = TrainingSettings.from_config(exp_conf)
    info = trial_info or TrialInfo()
    seed = info.trial_seed
    if seed is None:
        seed = settings.experiment_seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
        logger.info("no reproducibility.experiment_seed given; using trial seed %d", seed)
    if aggregation_frequency is None:
        aggregation_frequency = settings.aggregation_frequency
    tb_path = None
    if enable_tensorboard_logging:
        tb_path = info.tensorboard_path or tensorboard.trial_tensorboard_path(
            info.experiment_id, info.trial_id
        )

    seed_everything(seed)
    context = PyTorchTrialContext(
        hparams=hparams if hparams is not None else exp_conf.get("hyperparameters") or {},
        exp_conf=exp_conf,
        distributed=distributed,
        aggregation_frequency=aggregation_frequency,
        average_aggregated_gradients=settings.average_aggregated_gradients,
        trial_seed=seed,
        trial_id=info.trial_id,
        experiment_id=info.experiment_id,
        tensorboard_path=tb_path,
    )
    context.harness.trial_info = info
    previous = tensorboard._active_path
    tensorboard.set_active_path(tb_path)
    try:
        yield context
    finally:
        tensorboard.set_active_path(previous)
        if context.harness.tensorboard_writer is not None:  # context.get_tensorboard_writer()
            context.harness.tensorboard_writer.close()
            context.harness.tensorboard_writer = None


def _tensorboard_dir(ctx: PyTorchTrialContext) -> Optional[str]:
    path = ctx.get_tensorboard_path()
    return None if path is None else str(path)


def _code_source(trial: PyTorchTrial, info: TrialInfo) -> Optional[str]:
    if info.context_dir is not None:
        return info.context_dir
    try:
        return inspect.getsourcefile(type(trial))
    except (TypeError, OSError):  # defined in a REPL, `python -c` or a notebook: no file
        return None


def _profiler(ctx: PyTorchTrialContext, settings: TrainingSettings) -> Optional[PyTorchCallback]:
    """The trial's ``context.set_profiler``, else the config's ``profiling`` section, else None."""
    if ctx.harness.profiler is not None:
        if settings.profiling_enabled:
            logger.info("profiling: the trial called context.set_profiler(); the config's section is unused")
        return ctx.harness.profiler
    if not settings.profiling_enabled:
        return None
    from determined_lite.pytorch.callbacks import Profiler

    return Profiler(settings.profiling_begin_on_batch, settings.profiling_end_after_batch)


class Trainer:
    """Trains one trial with its context: ``Trainer(trial, context).fit(max_length=Epoch(3))``.

    ``callbacks`` (det-lite's addition): a list of callbacks (named by class, ``#2`` for a
    repeat) or a dict of names to callbacks, run after the trial's ``build_callbacks()`` and
    before global callbacks in every ``fit``; their state is checkpointed under those names.
    """

    def __init__(
        self, trial: PyTorchTrial, context: PyTorchTrialContext, callbacks: Optional[Callbacks] = None
    ) -> None:
        self.trial = trial
        self.context = context
        self.callbacks = name_callbacks(callbacks or [], "")

    def fit(
        self,
        checkpoint_period: Optional[TrainUnit] = None,
        validation_period: Optional[TrainUnit] = None,
        max_length: Optional[TrainUnit] = None,
        reporting_period: TrainUnit = DEFAULT_REPORTING_PERIOD,
        checkpoint_policy: Union[str, CheckpointPolicy] = CheckpointPolicy.BEST,
        latest_checkpoint: Optional[str] = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        *,
        progress: Optional[bool] = None,
        record: Optional[bool] = None,
        should_stop: Optional[Callable[[], bool]] = None,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
        callbacks: Optional[Callbacks] = None,
        warm_start: Optional[str] = None,
    ) -> TrainResult:
        """Train to ``max_length``, validating and checkpointing on the given periods.

        ``latest_checkpoint`` resumes exactly from a checkpoint directory (or the uuid of one in
        the checkpoint root, as Determined's ``info.latest_checkpoint``). A final validation
        and checkpoint always happen at the end. ``checkpoint_policy`` adds checkpoints after
        validations: ``"best"`` (searcher metric improved), ``"all"`` or ``"none"``. Without a
        searcher metric (``searcher.metric`` of ``exp_conf``), as in Determined's local training
        mode, ``"best"`` falls back to ``"all"`` with a warning.

        From plain Python (no experiment ids in ``init``'s ``trial_info``), the run is recorded
        in the store as a ``local`` experiment: its checkpoints are listed by ``det-lite
        checkpoint list`` and the ``checkpoint_storage`` retention policy (Determined's defaults:
        the best and the latest) removes the others; ``record=False`` keeps it out of the store
        (nothing listed, nothing removed). ``progress``: the bar and metric lines on stdout;
        default on for such runs unless ``$DET_LITE_PROGRESS=0``.
        ``callbacks`` (det-lite's addition) run for this ``fit`` only, after those given to the
        ``Trainer``; same forms and names. ``warm_start`` (det-lite's addition; experiments set it
        from ``searcher.source_checkpoint_uuid`` / ``source_trial_id``): a checkpoint directory,
        det-lite's or Determined's, that a run not resuming starts from as Determined's warm
        start does: weights, optimizer, LR scheduler, scaler, callback and random states, with
        training at batch 0.
        In a script det-lite runs (``det.get_cluster_info()`` set, ``init()`` without arguments),
        the trial decides the length (the searcher's; the script's own ``max_length`` when the
        searcher has none), the checkpoint to resume from and the store hooks; periods and
        policy given here win over the config's.
        Returns the reported metrics and the checkpoints written (retention may have removed
        some of them since).
        """
        script = active_trial()
        if script is None or not script.owns(self.context):
            return self._fit(
                checkpoint_period,
                validation_period,
                max_length,
                reporting_period,
                checkpoint_policy,
                latest_checkpoint,
                step_zero_validation,
                test_mode,
                progress=progress,
                record=record,
                should_stop=should_stop,
                core_callbacks=core_callbacks,
                callbacks=callbacks,
                warm_start=warm_start,
            )
        given = dict(
            max_length=max_length,
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            reporting_period=None if reporting_period == DEFAULT_REPORTING_PERIOD else reporting_period,
            checkpoint_policy=None if checkpoint_policy == CheckpointPolicy.BEST else checkpoint_policy,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
            callbacks=callbacks,
        )
        arguments = script.fit_arguments(self.context, given)
        if arguments["latest_checkpoint"] is None:
            arguments["latest_checkpoint"] = latest_checkpoint  # a warm start the script chose
        result = self._fit(**arguments)
        script.fit_done(result)
        return result

    def _fit(
        self,
        checkpoint_period: Optional[TrainUnit] = None,
        validation_period: Optional[TrainUnit] = None,
        max_length: Optional[TrainUnit] = None,
        reporting_period: TrainUnit = DEFAULT_REPORTING_PERIOD,
        checkpoint_policy: Union[str, CheckpointPolicy] = CheckpointPolicy.BEST,
        latest_checkpoint: Optional[str] = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        *,
        progress: Optional[bool] = None,
        record: Optional[bool] = None,
        should_stop: Optional[Callable[[], bool]] = None,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
        callbacks: Optional[Callbacks] = None,
        warm_start: Optional[str] = None,
    ) -> TrainResult:
        """Train (the body of :meth:`fit`)."""
        ctx = self.context
        settings, info = ctx.harness.settings, ctx.harness.trial_info
        if max_length is None:
            max_length = settings.max_length
        if max_length is None:
            raise ValueError(
                "Trainer.fit() needs max_length=Batch(n) or Epoch(n) (or searcher.max_length in the "
                "experiment config)"
            )
        if settings.searcher_metric is None and checkpoint_policy == CheckpointPolicy.BEST:
            logger.warning(
                "checkpoint_policy='best' needs a searcher metric (searcher.metric in exp_conf); "
                "without one, as in Determined's local training mode, every validation is "
                "followed by a checkpoint ('all')"
            )
            checkpoint_policy = CheckpointPolicy.ALL
        is_chief, state = ctx.distributed.is_chief, ctx.harness.state
        root = info.checkpoint_root or checkpoint_root(ctx.get_experiment_config())
        if latest_checkpoint is not None and not os.path.isdir(latest_checkpoint):
            by_uuid = os.path.join(root, latest_checkpoint)
            latest_checkpoint = by_uuid if os.path.isdir(by_uuid) else latest_checkpoint
        code_source = _code_source(self.trial, info)
        local = info.experiment_id is None and info.trial_id is None
        if progress is None:
            progress = local and progress_by_default()
        if record is None:
            record = local
        display = ProgressDisplay(sys.stdout, type(self.trial).__name__) if progress and is_chief else None
        say: Callable[[str], None] = display.write if display is not None else logger.info
        run = self._record(root, code_source) if record and is_chief else None
        core: List[Tuple[str, PyTorchCallback]] = [
            (
                "_core.tensorboard",
                TensorBoardMetrics(
                    # context.set_enable_tensorboard_logging(False): no metrics to TensorBoard
                    _tensorboard_dir(ctx) if ctx.harness.tensorboard_logging else None,
                    is_chief,
                    state,
                    ctx.get_hparams(),
                ),
            ),
            ("_core.logger", MetricLogger(is_chief, state, display.write if display is not None else None)),
        ]
        if display is not None:
            meter = ProgressMeter(
                display.show, settings.searcher_metric, state=state, interval_s=LOCAL_INTERVAL_S
            )
            core.append(("_core.progress", meter))
        if run is not None:
            core += run.callbacks(ctx)
            stop = should_stop
            should_stop = lambda: (stop is not None and stop()) or run.should_stop()  # noqa: E731
            ctx.harness.trial_info = dataclasses.replace(
                info, experiment_id=run.experiment_id, trial_id=run.trial_id, store_path=run.store_path
            )
            eid = run.experiment_id
            say(f"recorded as local experiment {eid}: det-lite experiment describe {eid}")
        spec = RunSpec(
            max_length=max_length,
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            reporting_period=reporting_period,
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
            checkpoint_root=root,
            code_source=code_source,
            searcher_metric=settings.searcher_metric,
            smaller_is_better=settings.smaller_is_better,
            should_stop=should_stop,
            warm_start=warm_start,
        )
        import_callback_modules(settings.callback_modules)  # their import registers global callbacks
        profiler = _profiler(ctx, settings)
        if profiler is not None:
            core.append(("_core.profiler", profiler))
        user = self.callbacks + name_callbacks(callbacks or [], "")
        try:
            result = TrialController(self.trial, ctx, spec, core + list(core_callbacks), user).run()
        except BaseException as e:
            if run is not None:
                _finish(run, False, e)
            raise
        finally:
            ctx.harness.trial_info = info
            if display is not None:
                display.close()
        if run is not None:
            ended = _finish(run, result.stopped_early, None)
            if ended is not None:
                say(
                    f"local experiment {run.experiment_id} {ended}: det-lite checkpoint list "
                    f"--experiment {run.experiment_id}"
                )
        return result

    def _record(self, root: str, code_source: Optional[str]) -> Any:
        """The store's record of this plain-Python run (``reporting/_local.py``), or None."""
        from determined_lite.pytorch._store_callback import LocalRun

        ctx = self.context
        settings, conf = ctx.harness.settings, ctx.get_experiment_config()
        name = type(self.trial).__name__
        context_dir = (
            code_source if code_source is None or os.path.isdir(code_source) else os.path.dirname(code_source)
        )
        return LocalRun.record(
            name=conf.get("name") or name,
            exp_conf=conf,
            hparams=ctx.get_hparams(),
            seed=ctx.get_trial_seed(),
            context_dir=context_dir,
            checkpoint_root=root,
            metric=settings.searcher_metric,
            smaller_is_better=settings.smaller_is_better,
        )


def _finish(run: Any, stopped_early: bool, error: Optional[BaseException]) -> Optional[str]:
    """Record the end of a local run; a store that fails now costs a warning, not the result."""
    from determined_lite.store import StoreError

    try:
        return str(run.finish(stopped_early, error))
    except (StoreError, OSError) as e:
        logger.warning("could not record the end of local experiment %s: %s", run.experiment_id, e)
        return None
