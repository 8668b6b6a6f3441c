"""Run a trial from plain Python: ``init()`` builds the context, ``Trainer.fit()`` trains."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import random
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from determined_lite import tensorboard
from determined_lite.config.units import Batch, TrainUnit
from determined_lite.distributed import DistributedContext
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._checkpoint import seed_everything
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._controller import RunSpec, TrainResult, TrialController
from determined_lite.pytorch._reporting import MetricLogger, TensorBoardMetrics
from determined_lite.pytorch._trial import PyTorchTrial
from determined_lite.store._paths import checkpoint_root

logger = logging.getLogger("determined_lite")

DEFAULT_REPORTING_PERIOD = Batch(100)  # Determined's default scheduling unit


@dataclasses.dataclass
class TrialInfo:
    """Identity of a trial inside an experiment (filled in by the experiment launcher)."""

    trial_id: Optional[int] = None
    experiment_id: Optional[int] = None
    trial_seed: Optional[int] = None
    context_dir: Optional[str] = None
    checkpoint_root: Optional[str] = None
    tensorboard_path: Optional[str] = None


def _conf(exp_conf: Dict[str, Any], *path: str, default: Any = None) -> Any:
    node: Any = exp_conf
    for key in path:
        if not isinstance(node, dict) or node.get(key) is None:
            return default
        node = node[key]
    return node


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
    info = trial_info or TrialInfo()
    seed = info.trial_seed
    if seed is None:
        seed = _conf(exp_conf, "reproducibility", "experiment_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
        logger.info("no reproducibility.experiment_seed given; using trial seed %d", seed)
    if aggregation_frequency is None:
        aggregation_frequency = _conf(exp_conf, "optimizations", "aggregation_frequency", default=1)
    average = _conf(exp_conf, "optimizations", "average_aggregated_gradients", default=True)
    tb_path = None
    if enable_tensorboard_logging:
        tb_path = info.tensorboard_path or tensorboard.trial_tensorboard_path(
            info.experiment_id, info.trial_id
        )

    seed_everything(seed)
    context = PyTorchTrialContext(
        hparams=hparams if hparams is not None else _conf(exp_conf, "hyperparameters", default={}),
        exp_conf=exp_conf,
        distributed=distributed,
        aggregation_frequency=aggregation_frequency,
        average_aggregated_gradients=average,
        trial_seed=seed,
        trial_id=info.trial_id,
        experiment_id=info.experiment_id,
        tensorboard_path=tb_path,
    )
    context._trial_info = info
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


class Trainer:
    """Trains one trial with its context: ``Trainer(trial, context).fit(max_length=Epoch(3))``."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self.trial = trial
        self.context = context

    def fit(
        self,
        checkpoint_period: Optional[TrainUnit] = None,
        validation_period: Optional[TrainUnit] = None,
        max_length: Optional[TrainUnit] = None,
        reporting_period: TrainUnit = DEFAULT_REPORTING_PERIOD,
        checkpoint_policy: str = "best",
        latest_checkpoint: Optional[str] = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        *,
        should_stop: Optional[Callable[[], bool]] = None,
        core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = (),
    ) -> TrainResult:
        """Train to ``max_length``, validating and checkpointing on the given periods.

        ``latest_checkpoint`` resumes exactly from a checkpoint directory. A final validation
        and checkpoint always happen at the end. ``checkpoint_policy`` adds checkpoints after
        validations: ``"best"`` (searcher metric improved), ``"all"`` or ``"none"``.
        Returns the reported metrics and the checkpoints written.
        """
        if max_length is None:
            max_length = _max_length_from_config(self.context.get_experiment_config())
        ctx = self.context
        exp_conf = ctx.get_experiment_config()
        info: TrialInfo = getattr(ctx, "_trial_info", None) or TrialInfo()
        spec = RunSpec(
            max_length=max_length,
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            reporting_period=reporting_period,
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
            checkpoint_root=info.checkpoint_root or checkpoint_root(exp_conf),
            code_source=_code_source(self.trial, info),
            searcher_metric=_conf(exp_conf, "searcher", "metric"),
            smaller_is_better=_conf(exp_conf, "searcher", "smaller_is_better", default=True),
            should_stop=should_stop,
        )
        controller: TrialController
        is_chief = ctx.distributed.is_chief

        def total_batches() -> int:
            return controller.result.total_batches

        core = [
            ("_core.tensorboard", TensorBoardMetrics(ctx.get_tensorboard_path(), is_chief, total_batches)),
            ("_core.logger", MetricLogger(is_chief, total_batches)),
        ] + list(core_callbacks)
        controller = TrialController(self.trial, ctx, spec, core)
        return controller.run()


def _max_length_from_config(exp_conf: Dict[str, Any]) -> TrainUnit:
    from determined_lite.config.units import length_from_config

    value = _conf(exp_conf, "searcher", "max_length")
    if value is None:
        raise ValueError(
            "Trainer.fit() needs max_length=Batch(n) or Epoch(n) (or searcher.max_length in the "
            "experiment config)"
        )
    return length_from_config(value, "searcher.max_length")
