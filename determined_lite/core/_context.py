"""``det.core.init()``: the Core API context of a script, backed by det-lite's store.

In a trial det-lite runs (``det.get_cluster_info()`` is set) every part reports to the trial:
metrics and checkpoints to the experiment store, the searcher's length, pause/kill as
preemption, the distributed context the worker joined. Outside det-lite it is Determined's
local mode: metrics are logged, checkpoints go to ``checkpoint_storage`` (a directory; default:
det-lite's checkpoint root), the searcher asks for one operation of length 1 (as Determined's
dummy searcher does) and nothing preempts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, Optional, Union

from determined_lite._errors import InvalidHP
from determined_lite.core._calls import note_call
from determined_lite.core._checkpoint import CheckpointContext
from determined_lite.core._preempt import PreemptContext, PreemptMode
from determined_lite.core._searcher import SearcherContext, Unit
from determined_lite.core._train import EarlyExitReason, TrainContext
from determined_lite.runtime._cluster import adopt_trial, get_cluster_info

logger = logging.getLogger("determined_lite")

_ALERT_LEVELS = {
    "info": logging.INFO,
    "warn": logging.WARNING,
    "debug": logging.DEBUG,
    "error": logging.ERROR,
}


class TensorboardMode:
    """Determined's TensorBoard modes; det-lite writes TensorBoard files in place either way."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


@dataclasses.dataclass(eq=False)
class Context:
    """``core_context``: ``checkpoint``, ``distributed``, ``preempt``, ``train``, ``searcher``,
    ``info`` (the cluster info, None in local mode), ``alert()``. Use it as
    ``with det.core.init() as c:``. ``_ending``: what records how an unmanaged run ended
    (``experiment._unmanaged``; Determined's ``_heartbeat``): started with the context, told of
    the exception (if any) it closes with."""

    checkpoint: CheckpointContext
    distributed: Any
    preempt: PreemptContext
    train: TrainContext
    searcher: SearcherContext
    info: Any = None
    _ending: Any = None

    def start(self) -> None:
        self.preempt.start()
        if self._ending is not None:
            self._ending.start()

    def close(self, exc_type: Any = None, exc_val: Any = None, exc_tb: Any = None) -> None:
        """Finish the TensorBoard file; an unmanaged run records its end (ERROR with
        ``exc_val``)."""
        self.preempt.close()
        self.train.close()
        if self._ending is not None:
            self._ending.close(exc_val)

    def __enter__(self) -> "Context":
        self.start()
        return self

    def alert(
        self,
        title: Optional[str] = None,
        description: Optional[str] = None,
        level: Optional[str] = "info",
    ) -> None:
        """Determined's workload alert (a webhook event there, whatever its level); det-lite has
        no webhooks, so it is one line of the trial's log: ``alert (LEVEL): title: description``,
        logged at ``level`` ("info", "warn", "debug", "error") but never below INFO."""
        if level not in _ALERT_LEVELS:
            raise ValueError(f"alert(level=...) must be one of {sorted(_ALERT_LEVELS)}, got {level!r}")
        text = (title or "") + (f": {description}" if description else "")
        logger.log(max(logging.INFO, _ALERT_LEVELS[level]), "alert (%s): %s", level, text)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if isinstance(exc, InvalidHP):  # as Determined: the trial ends, the search goes on
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
        self.close(exc_type, exc, tb)


def _units(exp_conf: Dict[str, Any]) -> Optional[Unit]:
    length = (exp_conf.get("searcher") or {}).get("max_length")
    if isinstance(length, dict) and len(length) == 1:
        return Unit(next(iter(length)).upper())
    return None


def _storage_root(checkpoint_storage: Union[None, str, Dict[str, Any]]) -> str:
    from determined_lite.store._paths import checkpoint_root

    if checkpoint_storage is None:
        return checkpoint_root({})
    if isinstance(checkpoint_storage, str):
        if "://" in checkpoint_storage:
            raise ValueError(
                f"checkpoint_storage {checkpoint_storage!r}: det-lite stores checkpoints in a directory"
            )
        return os.path.abspath(checkpoint_storage)
    return checkpoint_root({"checkpoint_storage": checkpoint_storage})


def _cloud_storage(config: Dict[str, Any], experiment_id: Optional[int]) -> Any:
    """A cloud ``checkpoint_storage``'s CheckpointStorage (None for a directory)."""
    from determined_lite.storage import CLOUD_TYPES, checkpoint_storage

    if (config.get("checkpoint_storage") or {}).get("type") not in CLOUD_TYPES:
        return None
    return checkpoint_storage(config, experiment_id)


def init(
    *,
    distributed: Any = None,
    checkpoint_storage: Union[None, str, Dict[str, Any]] = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = TensorboardMode.AUTO,
) -> Context:
    """The Core API context of this process (use it as a context manager)."""
    trial = adopt_trial(distributed)
    info = get_cluster_info()
    if trial is None:
        from determined_lite.distributed import SingleProcessContext

        dist = distributed or SingleProcessContext()
        root = _storage_root(checkpoint_storage)
        return Context(
            CheckpointContext(dist, root),
            dist,
            PreemptContext(dist, preempt_mode),
            TrainContext(dist),
            SearcherContext(dist, 1, None),
            info,
        )
    return trial_context(trial, distributed, checkpoint_storage, preempt_mode, info)


def trial_context(
    trial: Any,
    distributed: Any,
    checkpoint_storage: Union[None, str, Dict[str, Any]],
    preempt_mode: PreemptMode,
    info: Any,
    ending: Any = None,
) -> Context:
    """The Core API context of ``trial`` (a ``launch._script.ScriptTrial``: the worker's, or an
    unmanaged run's with its ``ending``)."""
    dist = distributed or trial.distributed
    if dist is not trial.distributed and dist.size != trial.distributed.size:
        raise ValueError(
            f"det.core.init(distributed=...) got {dist.size} workers but the trial runs "
            f"{trial.distributed.size}: use det.core.DistributedContext.from_torch_distributed() "
            "or from_horovod() as the config's engine says"
        )
    spec = trial.spec
    root = _storage_root(checkpoint_storage) if checkpoint_storage is not None else str(spec.checkpoint_root)
    cloud = _cloud_storage(spec.exp_conf, spec.experiment_id) if checkpoint_storage is None else None
    trial.core_started()
    note_call(trial, "det.core.init()")
    return Context(
        CheckpointContext(dist, root, trial, cloud),
        dist,
        PreemptContext(dist, preempt_mode, trial),
        TrainContext(dist, trial, spec.tensorboard_path),
        SearcherContext(dist, int(trial.target), _units(spec.exp_conf), trial),
        info,
        ending,
    )
