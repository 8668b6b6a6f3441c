"""Run a trial from plain Python: ``init()`` builds the context, ``Trainer.fit()`` trains."""

from __future__ import annotations

import contextlib
import inspect
import logging
import random
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

from determined_lite import tensorboard
from determined_lite.config import DEFAULT_REPORTING_PERIOD, CheckpointPolicy, TrainingSettings, TrainUnit
from determined_lite.distributed import DistributedContext
from determined_lite.pytorch._callback import Callbacks, PyTorchCallback, name_callbacks
from determined_lite.pytorch._callback_modules import import_callback_modules
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._controller import RunSpec, TrainResult, TrialController
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._reporting import MetricLogger, TensorBoardMetrics
from determined_lite.pytorch._rng import seed_everything
from determined_lite.pytorch._trial import PyTorchTrial
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
) -> Iterator[PyTorchTrialContext]:
    """Create the context of one trial; seeds python, numpy and torch before the trial is built.

    The trial seed is ``trial_info.trial_seed``, else ``reproducibility.experiment_seed`` of
    ``exp_conf``, else a random one (logged, and saved in checkpoints).
    ``aggregation_frequency`` defaults to ``optimizations.aggregation_frequency``, else 1.
    """
    exp_conf = dict(exp_conf or {})
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
        should_stop: Optional[Callable[[], bool]] = None,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
        callbacks: Optional[Callbacks] = None,
    ) -> TrainResult:
        """Train to ``max_length``, validating and checkpointing on the given periods.

        ``latest_checkpoint`` resumes exactly from a checkpoint directory. A final validation
        and checkpoint always happen at the end. ``checkpoint_policy`` adds checkpoints after
        validations: ``"best"`` (searcher metric improved), ``"all"`` or ``"none"``. Without a
        searcher metric (``searcher.metric`` of ``exp_conf``), as in Determined's local training
        mode, ``"best"`` falls back to ``"all"`` with a warning.
        ``callbacks`` (det-lite's addition) run for this ``fit`` only, after those given to the
        ``Trainer``; same forms and names.
        Returns the reported metrics and the checkpoints written.
        """
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
        spec = RunSpec(
            max_length=max_length,
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            reporting_period=reporting_period,
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
            checkpoint_root=info.checkpoint_root or checkpoint_root(ctx.get_experiment_config()),
            code_source=_code_source(self.trial, info),
            searcher_metric=settings.searcher_metric,
            smaller_is_better=settings.smaller_is_better,
            should_stop=should_stop,
        )
        import_callback_modules(settings.callback_modules)  # their import registers global callbacks
        is_chief, state = ctx.distributed.is_chief, ctx.harness.state
        core = [
            ("_core.tensorboard", TensorBoardMetrics(ctx.get_tensorboard_path(), is_chief, state)),
            ("_core.logger", MetricLogger(is_chief, state)),
        ] + list(core_callbacks)
        profiler = _profiler(ctx, settings)
        if profiler is not None:
            core.append(("_core.profiler", profiler))
        user = self.callbacks + name_callbacks(callbacks or [], "")
        return TrialController(self.trial, ctx, spec, core, user).run()

