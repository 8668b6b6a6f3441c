"""Run a trial: ``init()`` builds the context, ``Trainer.fit()`` trains (``Trainer.run`` runs the
:class:`FitPlan` that ``fit``, or an experiment worker, builds).

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
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from determined_lite import tensorboard
from determined_lite.config import (
    CheckpointPolicy,
    CompileSettings,
    TrainingSettings,
)
from determined_lite.distributed import DistributedContext
from determined_lite.pytorch._callback import Callbacks, PyTorchCallback, name_callbacks
from determined_lite.pytorch._callback_modules import import_callback_modules
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._controller import RunSpec, TrialController
from determined_lite.pytorch._fit_plan import FitPlan, plan_parameters
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._interrupt import CtrlC, CtrlCNotice, FitInterrupted, resume_hint
from determined_lite.pytorch._progress import (
    LOCAL_INTERVAL_S,
    ProgressDisplay,
    ProgressMeter,
    progress_by_default,
)
from determined_lite.pytorch._reporting import MetricLogger, TensorBoardMetrics
from determined_lite.pytorch._rng import seed_everything
from determined_lite.pytorch._train_result import TrainResult
from determined_lite.pytorch._trial import PyTorchTrial
from determined_lite.runtime._cluster import active_trial
from determined_lite.store import ExperimentState
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
    exp_conf = _with_compile(dict(exp_conf or {}), compile)
    settings = TrainingSettings.from_config(exp_conf)
    info = trial_info or TrialInfo()
    tb_path = _tensorboard_path(info) if enable_tensorboard_logging else None
    seed = _trial_seed(info, settings)
    seed_everything(seed)
    context = PyTorchTrialContext(
        hparams=hparams if hparams is not None else exp_conf.get("hyperparameters") or {},
        exp_conf=exp_conf,
        distributed=distributed,
        aggregation_frequency=(
            settings.aggregation_frequency if aggregation_frequency is None else aggregation_frequency
        ),
        average_aggregated_gradients=settings.average_aggregated_gradients,
        trial_seed=seed,
        trial_id=info.trial_id,
        experiment_id=info.experiment_id,
        tensorboard_path=tb_path,
    )
    context.harness.trial_info = info
    with tensorboard.active_path(tb_path):
        try:
            yield context
        finally:
            if context.harness.tensorboard_writer is not None:  # context.get_tensorboard_writer()
                context.harness.tensorboard_writer.close()
                context.harness.tensorboard_writer = None


def _with_compile(
    exp_conf: Dict[str, Any],
    compile: Union[None, bool, Mapping[str, Any], CompileSettings],  # noqa: A002
) -> Dict[str, Any]:
    """``exp_conf`` with ``init(compile=...)`` as its ``optimizations.compile`` section."""
    if compile is None:
        return exp_conf
    chosen = CompileSettings.from_value(compile, "init(compile=...)")
    if compile is not False and not (isinstance(compile, Mapping) and "enabled" in compile):
        chosen = dataclasses.replace(chosen, enabled=True)  # asking for options means "on"
    optimizations = {**(exp_conf.get("optimizations") or {}), "compile": chosen.to_json()}
    return {**exp_conf, "optimizations": optimizations}


def _trial_seed(info: TrialInfo, settings: TrainingSettings) -> int:
    """The trial's seed: its ``TrialInfo``'s, else the config's experiment seed, else a random one."""
    seed = info.trial_seed if info.trial_seed is not None else settings.experiment_seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
        logger.info("no reproducibility.experiment_seed given; using trial seed %d", seed)
    return seed


def _tensorboard_path(info: TrialInfo) -> str:
    return info.tensorboard_path or tensorboard.trial_tensorboard_path(info.experiment_id, info.trial_id)


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


def _profiler(
    ctx: PyTorchTrialContext, settings: TrainingSettings, fit_enabled: bool
) -> Optional[PyTorchCallback]:
    """The trial's ``context.set_profiler``, else the config's ``profiling`` section (enabled
    there or by ``fit(profiling_enabled=True)``), else None."""
    from determined_lite.pytorch.callbacks import Profiler

    enabled = settings.profiling_enabled or fit_enabled
    if ctx.harness.profiler_kwargs is not None:
        if enabled:
            logger.info("profiling: the trial called context.set_profiler(); the config's section is unused")
        return Profiler(**ctx.harness.profiler_kwargs)
    if not enabled:
        return None
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

    @plan_parameters(FitPlan)
    def fit(self, plan: FitPlan) -> TrainResult:
        """Train to ``max_length``, validating and checkpointing on the given periods.

        Determined's parameters, in its order: ``checkpoint_period``, ``validation_period``,
        ``max_length``, ``reporting_period``, ``checkpoint_policy``, ``latest_checkpoint``,
        ``step_zero_validation``, ``test_mode`` (the fields of :class:`FitPlan`).
        ``latest_checkpoint`` resumes exactly from a checkpoint directory (or the uuid of one in
        the checkpoint root, as Determined's ``info.latest_checkpoint``). A final validation
        and checkpoint always happen at the end. ``checkpoint_policy`` adds checkpoints after
        validations: ``"best"`` (searcher metric improved; the default), ``"all"`` or
        ``"none"``. Without a searcher metric (``searcher.metric`` of ``exp_conf``), as in
        Determined's local training mode, it is ``"all"`` (a warning if ``"best"`` was passed).

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
        training at batch 0. ``should_stop`` (polled at each report) and ``core_callbacks`` (run
        before the trial's) are det-lite's hooks for the code that runs experiments.
        In a script det-lite runs (``det.get_cluster_info()`` set, ``init()`` without arguments),
        the trial decides the length (the searcher's; the script's own ``max_length`` when the
        searcher has none), the checkpoint to resume from and the store hooks; periods and
        policy given here win over the config's.
        Ctrl-C in such a run stops it at the next report with a checkpoint, records it PAUSED
        and says ``fit(latest_checkpoint=...)`` to resume; ``fit`` then raises
        :class:`FitInterrupted` (a script exits 1 without a traceback). A second Ctrl-C stops
        at once (``KeyboardInterrupt``).
        Returns the reported metrics and the checkpoints written (each says whether retention
        removed it); ``latest_checkpoint`` and ``best_checkpoint`` name those still on disk.
        """
        script = active_trial()
        if script is None or not script.owns(self.context):
            return self.run(plan)
        result = self.run(script.fit_plan(self.context, plan))
        script.fit_done(result)
        return result

    def run(self, plan: FitPlan) -> TrainResult:
        """Train as ``plan`` says: ``fit`` builds the plan from its arguments, an experiment
        worker from its trial's spec. A plain-Python run stopped by a first Ctrl-C raises
        :class:`FitInterrupted` once its end is recorded and said."""
        ctx = self.context
        settings = ctx.harness.settings
        import_callback_modules(settings.callback_modules)  # their import registers global callbacks
        spec = _run_spec(plan, ctx, _code_source(self.trial, ctx.harness.trial_info))
        outputs = self._outputs(plan, spec)
        spec, recorded = outputs.attach(spec, ctx)
        core = _core_callbacks(ctx, outputs.display) + recorded
        profiler = _profiler(ctx, settings, plan.profiling_enabled)
        if profiler is not None:
            core.append(("_core.profiler", profiler))
        user = self.callbacks + name_callbacks(plan.callbacks or [], "")
        ctx.harness.say = outputs.say
        try:
            with outputs.ctrl_c.installed(outputs.local):
                result = self._train(outputs, spec, core + list(plan.core_callbacks), user)
        finally:
            ctx.harness.say = logger.info
        if outputs.ctrl_c.requested:
            raise FitInterrupted(result)
        return result

    def _train(
        self,
        outputs: _Outputs,
        spec: RunSpec,
        core: List[Tuple[str, PyTorchCallback]],
        user: List[Tuple[str, PyTorchCallback]],
    ) -> TrainResult:
        """Run the loop; record and say how it ended, an error included."""
        controller: Optional[TrialController] = None
        try:
            controller = TrialController(self.trial, self.context, spec, core, user)
            result = controller.run()
        except BaseException as e:
            stopped_at = self.context.harness.state.batches_done
            outputs.end(controller.result if controller else None, stopped_at, e)
            raise
        result.mark_deleted()
        outputs.end(result, result.total_batches, None)
        result.mark_deleted()  # the end applies the retention policy once more
        return result

    def _outputs(self, plan: FitPlan, spec: RunSpec) -> _Outputs:
        """The chief's bar and local record for ``plan``; a plain-Python run (no experiment ids)
        gets both unless told otherwise, and Ctrl-C handling on every worker."""
        info = self.context.harness.trial_info
        local = info.experiment_id is None and info.trial_id is None
        if not self.context.distributed.is_chief:
            return _Outputs(None, None, local)
        progress = local and progress_by_default() if plan.progress is None else plan.progress
        record = local if plan.record is None else plan.record
        name = type(self.trial).__name__
        display = ProgressDisplay(sys.stdout, name) if progress else None
        return _Outputs(display, _record(self.context, name, spec) if record else None, local)


def _run_spec(plan: FitPlan, ctx: PyTorchTrialContext, code_source: Optional[str]) -> RunSpec:
    """The loop's spec of ``plan``: its length (else the config's), where checkpoints go, the
    checkpoint to resume from (a directory, or a uuid in that root), and the policy (``best``
    needs a searcher metric: ``all`` without one, as Determined's local training mode)."""
    settings, info = ctx.harness.settings, ctx.harness.trial_info
    max_length = settings.max_length if plan.max_length is None else plan.max_length
    if max_length is None:
        raise ValueError(
            "Trainer.fit() needs max_length=Batch(n) or Epoch(n) (or searcher.max_length in the "
            "experiment config)"
        )
    given = None if plan.checkpoint_policy is None else CheckpointPolicy(plan.checkpoint_policy)
    policy = _checkpoint_policy(given, settings.searcher_metric)
    root = info.checkpoint_root or checkpoint_root(ctx.get_experiment_config())
    latest = plan.latest_checkpoint
    if latest is not None and not os.path.isdir(latest) and os.path.isdir(os.path.join(root, latest)):
        latest = os.path.join(root, latest)
    planned = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    return RunSpec(
        **{
            **planned,
            "max_length": max_length,
            "checkpoint_policy": policy,
            "latest_checkpoint": latest,
            "checkpoint_root": root,
            "code_source": code_source,
            "searcher_metric": settings.searcher_metric,
            "smaller_is_better": settings.smaller_is_better,
            "trial_info": info,
        }
    )


def _checkpoint_policy(given: Optional[CheckpointPolicy], metric: Optional[str]) -> CheckpointPolicy:
    """``given``, else ``best``; ``best`` needs a searcher metric: without one it is ``all``, as
    in Determined's local training mode (a warning only when the caller asked for ``best``)."""
    if metric is not None:
        return given or CheckpointPolicy.BEST
    if given == CheckpointPolicy.BEST:
        logger.warning(
            "checkpoint_policy='best' needs a searcher metric (searcher.metric in exp_conf); "
            "without one, as in Determined's local training mode, every validation is "
            "followed by a checkpoint ('all')"
        )
    return CheckpointPolicy.ALL if given in (None, CheckpointPolicy.BEST) else given


def _core_callbacks(
    ctx: PyTorchTrialContext, display: Optional[ProgressDisplay]
) -> List[Tuple[str, PyTorchCallback]]:
    """Where metrics go: TensorBoard, the log (or the bar's lines) and the bar."""
    is_chief, state = ctx.distributed.is_chief, ctx.harness.state
    # context.set_enable_tensorboard_logging(False): no metrics to TensorBoard
    tb_dir = _tensorboard_dir(ctx) if ctx.harness.tensorboard_logging else None
    core: List[Tuple[str, PyTorchCallback]] = [
        ("_core.tensorboard", TensorBoardMetrics(tb_dir, is_chief, state, ctx.get_hparams())),
        ("_core.logger", MetricLogger(is_chief, state, display.write if display is not None else None)),
    ]
    if display is not None:
        metric = ctx.harness.settings.searcher_metric
        meter = ProgressMeter(display.show, metric, state=state, interval_s=LOCAL_INTERVAL_S)
        core.append(("_core.progress", meter))
    return core


@dataclasses.dataclass(frozen=True)
class _Outputs:
    """Where the chief shows a run (the bar and metric lines on stdout) and records it (a
    ``local`` experiment in the store: ``reporting/_local.py``'s ``LocalRun``); a plain-Python
    run (``local``) also handles Ctrl-C (``_interrupt.py``)."""

    display: Optional[ProgressDisplay]
    record: Any
    local: bool
    ctrl_c: CtrlC = dataclasses.field(default_factory=CtrlC)

    def say(self, line: str) -> None:
        (self.display.write if self.display is not None else logger.info)(line)

    def attach(
        self, spec: RunSpec, ctx: PyTorchTrialContext
    ) -> Tuple[RunSpec, List[Tuple[str, PyTorchCallback]]]:
        """``spec`` with the record's ids and the stop requests (the store's, a first Ctrl-C),
        and the record's store callbacks."""
        run, ctrl_c = self.record, self.ctrl_c
        core: List[Tuple[str, PyTorchCallback]] = []
        if self.local:  # the chief's vote stops every worker (spec.should_stop)
            if ctx.distributed.is_chief:
                core.append(("_core.ctrl_c", CtrlCNotice(ctrl_c, self.say)))
            spec = dataclasses.replace(spec, should_stop=_either(spec.should_stop, lambda: ctrl_c.requested))
        if run is None:
            return spec, core
        eid = run.experiment_id
        info = dataclasses.replace(
            ctx.harness.trial_info,
            experiment_id=eid,
            trial_id=run.trial_id,
            store_path=run.store_path,
        )
        self.say(f"recorded as local experiment {eid}: det-lite experiment describe {eid}")
        return (
            dataclasses.replace(
                spec,
                should_stop=_either(spec.should_stop, run.should_stop),
                trial_info=info,
            ),
            core + run.callbacks(ctx),
        )

    def end(self, result: Optional[TrainResult], stopped_at: int, error: Optional[BaseException]) -> None:
        """Close the bar, record how the run ended (a store that fails now costs a warning) and
        say it: with the checkpoint to resume from when it stopped before its end (an error other
        than Ctrl-C says nothing here: its traceback follows)."""
        run, interrupted = self.record, isinstance(error, KeyboardInterrupt)
        paused = self.ctrl_c.requested or interrupted
        ended = _finish(run, result, paused, error) if run is not None else None
        if self.display is not None:
            self.display.close()
        if error is not None and not interrupted:
            return
        stopped = interrupted or (result is not None and result.stopped_early)
        hint = resume_hint(stopped_at, _latest_live(result))
        if run is None:
            if paused:
                self.say(f"training {hint}")
        elif ended is not None:
            self.say(_ending(run.experiment_id, ended, stopped, stopped_at, hint))


def _ending(eid: int, ended: ExperimentState, stopped: bool, stopped_at: int, hint: str) -> str:
    """The last line of a recorded run: how to resume it when it stopped before its end."""
    if stopped and ended != ExperimentState.COMPLETED:
        return f"local experiment {eid} {ended.value}: {hint}"
    early = f" at batch {stopped_at} (the trial asked to stop)" if stopped else ""
    return f"local experiment {eid} {ended.value}{early}: det-lite checkpoint list --experiment {eid}"


def _either(first: Optional[Callable[[], bool]], second: Callable[[], bool]) -> Callable[[], bool]:
    """A stop request: ``first``'s (when given), else ``second``'s."""
    return lambda: (first is not None and first()) or second()


def _latest_live(result: Optional[TrainResult]) -> Optional[Dict[str, Any]]:
    """The newest checkpoint of ``result`` still on disk."""
    live = result.live_checkpoints() if result is not None else []
    return live[-1] if live else None


def _record(ctx: PyTorchTrialContext, name: str, spec: RunSpec) -> Any:
    """The store's record of this plain-Python run (``reporting/_local.py``)."""
    from determined_lite.pytorch._store_callback import LocalRun

    settings, conf, code = ctx.harness.settings, ctx.get_experiment_config(), spec.code_source
    return LocalRun.record(
        name=conf.get("name") or name,
        exp_conf=conf,
        hparams=ctx.get_hparams(),
        seed=ctx.get_trial_seed(),
        context_dir=code if code is None or os.path.isdir(code) else os.path.dirname(code),
        checkpoint_root=spec.checkpoint_root,
        metric=settings.searcher_metric,
        smaller_is_better=settings.smaller_is_better,
    )


def _finish(
    run: Any, result: Optional[TrainResult], paused: bool, error: Optional[BaseException]
) -> Optional[ExperimentState]:
    """Record the end of a local run (``paused``: by Ctrl-C); a store that fails now costs a
    warning, not the result."""
    from determined_lite.store import StoreError

    stopped_early = result is not None and result.stopped_early
    try:
        return run.finish(stopped_early, error, paused=paused)
    except (StoreError, OSError) as e:
        logger.warning("could not record the end of local experiment %s: %s", run.experiment_id, e)
        return None
