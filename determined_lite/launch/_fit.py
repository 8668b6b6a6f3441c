"""What ``Trainer.run`` is given in a worker (a ``FitPlan``), and what its result becomes:
shared by the worker of a class trial (``worker.py``) and a script's ``Trainer.fit`` (``_script.py``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from determined_lite.config import OWN_LENGTH
from determined_lite.config.units import length_from_config
from determined_lite.reporting._sink import remote_next_op
from determined_lite.runtime._next_op import ask_next_length
from determined_lite.runtime._spec import WorkerResult, WorkerSpec, WorkerStatus

if TYPE_CHECKING:  # torch: imported when a trial fits, not by `det-lite run`'s CLI process
    from determined_lite.pytorch._fit_plan import FitPlan

Hooks = Tuple[List[Tuple[str, Any]], Optional[Callable[[], bool]]]


def _experiment_hooks(spec: WorkerSpec, is_chief: bool) -> Hooks:
    """Store-writing callbacks and the pause/kill poll, when the trial belongs to an experiment."""
    if spec.store_path is None:
        return [], None
    from determined_lite.pytorch._store_callback import worker_hooks

    return worker_hooks(spec, is_chief)


def trial_info(spec: WorkerSpec) -> Any:
    """The ``TrialInfo`` of the trial ``spec`` runs (ids, seed, where its files go)."""
    from determined_lite.pytorch import TrialInfo

    return TrialInfo(
        trial_id=spec.trial_id,
        experiment_id=spec.experiment_id,
        trial_seed=spec.trial_seed,
        context_dir=spec.context_dir,
        checkpoint_root=spec.checkpoint_root,
        tensorboard_path=spec.tensorboard_path,
        store_path=os.path.realpath(spec.store_path) if spec.store_path else None,
    )


def fit_plan(spec: WorkerSpec, dist: Any, ctx: Any, extra_callbacks: Sequence[Tuple[str, Any]]) -> FitPlan:
    """What ``Trainer.run`` trains in a worker: the searcher's length (None when the searcher sets
    none: a script's ``fit`` gives its own), the latest checkpoint, the config's periods and
    policy, and the chief's store hooks (bound to ``ctx``)."""
    from determined_lite.pytorch._fit_plan import CONFIG_FIELDS, FitPlan

    callbacks, should_stop = _experiment_hooks(spec, dist.is_chief)
    core = list(callbacks) + list(extra_callbacks)
    for _, callback in core:
        if hasattr(callback, "bind"):
            callback.bind(ctx)
    settings = spec.training_settings()
    own = next(iter(spec.max_length.values())) == OWN_LENGTH
    return FitPlan(
        max_length=None if own else length_from_config(spec.max_length, "max_length"),
        latest_checkpoint=spec.latest_checkpoint,
        test_mode=spec.test_mode,
        **{name: getattr(settings, name) for name in CONFIG_FIELDS},
        warm_start=spec.warm_start,
        should_stop=should_stop,
        next_length=_next_length(spec) if spec.ask_next_op else None,
        core_callbacks=tuple(core),
        progress=False,  # the runner draws the bars, from the chief's progress file
        record=False,  # an experiment trial's chief writes to the store through its hooks
    )


def _next_length(spec: WorkerSpec) -> Callable[[Optional[float]], Any]:
    """``FitPlan.next_length`` of an experiment's run: the chief asks the runner
    (``runtime/_next_op.py``); a promotion decided at once trains on in this process."""

    def ask(metric: Optional[float]) -> Any:
        if ask_next_length(spec, metric, remote_next_op()) is None:
            return None
        return length_from_config(spec.max_length, "max_length")

    return ask


def result_of(result: Any) -> WorkerResult:
    """The ``WorkerResult`` of a ``TrainResult``."""
    last = result.validation_metrics[-1]["metrics"] if result.validation_metrics else None
    return WorkerResult(
        status=WorkerStatus.STOPPED if result.stopped_early else WorkerStatus.COMPLETED,
        total_batches=result.total_batches,
        best_validation=result.best_validation,
        validation_metrics=last,
        checkpoints=result.checkpoints,
    )
