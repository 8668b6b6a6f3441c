"""The chief's store writes: every reported training and validation metric and every checkpoint
of one trial, as they happen (so other terminals see them live), for class trials, Core API
scripts and plain-Python local runs alike.

:class:`TrialReporter` is the interface the layers above plug into: plain methods, no training
loop (``pytorch/_store_callback.py`` turns it into a callback; ``core/`` calls it directly).
Registering a checkpoint applies the experiment's retention policy to the trial
(``_retention.register_checkpoint``): a running trial never holds more checkpoints than
``checkpoint_storage`` keeps. ``stop_requested`` is the pause/kill poll, which the loop honours
at the next optimizer-step boundary with a checkpoint.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Dict, Optional

import numpy as np

from determined_lite.reporting._metric import is_better
from determined_lite.reporting._retention import RetentionPolicy, register_checkpoint
from determined_lite.reporting._sink import REPORT_FD_ENV, remote_reporter
from determined_lite.runtime._spec import WorkerSpec
from determined_lite.storage import CLOUD_TYPES, checkpoint_storage
from determined_lite.store import Action, Store

STOP_ACTIONS = (Action.PAUSE, Action.KILL)


def stop_requested(store: Any, experiment_id: int) -> bool:
    """Whether ``pause`` or ``kill`` was asked of the experiment (from any terminal)."""
    return store.requests.pending(experiment_id) in STOP_ACTIONS


@dataclasses.dataclass(eq=False)
class TrialReporter:
    """One trial's store writes, as its chief reports them: the one writer that class trials
    (through ``pytorch``'s ``StoreCallback``) and Core API scripts (``determined_lite.core``) share.

    ``experiment_id`` and ``retention``: registering a checkpoint forgets (and removes) the
    trial's checkpoints the policy no longer keeps; without an experiment, nothing is removed.
    """

    store: Any
    trial_id: int
    experiment_id: Optional[int]
    retention: Optional[RetentionPolicy]
    metric: Optional[str] = None  # the searcher metric: the trial's best_validation follows it
    smaller_is_better: bool = True

    def restart_at(self, batches: int) -> None:
        """A resumed trial re-trains what came after its checkpoint: metrics reported past it by
        the interrupted run are replaced by the ones this run reports."""
        self.store.metrics.delete_after(self.trial_id, batches)

    def own_length(self, batches: int) -> None:
        """The length a script's ``fit`` trains to when the searcher sets none (recorded once per
        run; the runner resumes the trial to it)."""
        self.store.trials.set_own_length(self.trial_id, batches)

    def training(self, batches: int, metrics: Dict[str, Any]) -> None:
        self.store.metrics.add_training(self.trial_id, batches, metrics)
        self.store.trials.update(self.trial_id, total_batches=batches)

    def validation(self, batches: int, metrics: Dict[str, Any]) -> None:
        """Record a validation; the trial's best searcher metric follows it."""
        self.store.metrics.add_validation(self.trial_id, batches, metrics)
        value = metrics.get(self.metric) if self.metric is not None else None
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            best = (self.store.trials.get(self.trial_id) or {}).get("best_validation")
            if is_better(float(value), best, self.smaller_is_better):
                self.store.trials.update(self.trial_id, best_validation=float(value))

    def checkpoint(
        self, uuid: str, checkpoint_dir: str, total_batches: int, metrics: Optional[Dict[str, Any]]
    ) -> None:
        """Upload a checkpoint written (and flushed) to ``checkpoint_dir`` to a cloud store, then
        register it: the store never lists a checkpoint whose upload did not complete."""
        if self.retention is not None and self.retention.storage is not None:
            self.retention.storage.upload(checkpoint_dir, uuid)
        self._register(uuid, checkpoint_dir, total_batches, metrics)

    def _register(
        self, uuid: str, checkpoint_dir: str, total_batches: int, metrics: Optional[Dict[str, Any]]
    ) -> None:
        if self.experiment_id is None or self.retention is None:  # no experiment, no policy
            self.store.checkpoints.add(self.trial_id, uuid, checkpoint_dir, total_batches, metrics)
            return
        checkpoint = {
            "trial_id": self.trial_id,
            "uuid": uuid,
            "path": checkpoint_dir,
            "total_batches": total_batches,
            "metrics": metrics,
        }
        register_checkpoint(self.store, self.experiment_id, self.retention, checkpoint)

    def uploaded_checkpoint(self, uuid: str, total_batches: int, metrics: Optional[Dict[str, Any]]) -> None:
        """A checkpoint a chief on another node uploaded to the cloud store itself: registered,
        at the path it is downloaded to on this machine when read."""
        assert self.retention is not None and self.retention.storage is not None
        self._register(uuid, self.retention.storage.local_path(uuid), total_batches, metrics)

    def forget_checkpoint(self, uuid: str) -> None:
        """A checkpoint the trial deleted itself (a Core API script): out of the store."""
        self.store.checkpoints.delete(uuid)

    def experiment_best_validation(self) -> Optional[float]:
        """The best searcher metric any trial of the experiment reported so far (None: none)."""
        if self.experiment_id is None:
            return None
        trials = self.store.trials.list(self.experiment_id)
        values = [t["best_validation"] for t in trials if t.get("best_validation") is not None]
        if not values:
            return None
        return float(min(values) if self.smaller_is_better else max(values))

    def stop_requested(self) -> bool:
        """Whether ``pause`` or ``kill`` was asked of the trial's experiment."""
        return self.experiment_id is not None and stop_requested(self.store, self.experiment_id)


def trial_reporter(spec: WorkerSpec, is_chief: bool) -> Any:
    """The chief's writer of the trial's metrics and checkpoints to the experiment store (None
    on other ranks and outside experiments): a :class:`TrialReporter` on the store, or, when the
    trial's executor runs it away from the store (Ray), a ``_sink.RemoteReporter`` to the driver."""
    if not is_chief or spec.store_path is None or spec.trial_id is None:
        return None
    if not os.environ.get(REPORT_FD_ENV):
        return store_reporter(spec)
    storage = None  # a cloud store: the chief uploads its checkpoints from its own node
    if (spec.exp_conf.get("checkpoint_storage") or {}).get("type") in CLOUD_TYPES:
        storage = checkpoint_storage(spec.exp_conf, spec.experiment_id)
    return remote_reporter(storage)


def store_reporter(spec: WorkerSpec) -> Optional[TrialReporter]:
    """The trial's writer on the experiment store (None outside experiments): the chief's, or
    the driver's that replays a remote chief's reports (``_sink.apply_record``)."""
    if spec.store_path is None or spec.trial_id is None:
        return None
    settings = spec.training_settings()
    metric = settings.searcher_metric
    retention = RetentionPolicy.from_config(
        spec.exp_conf, metric, settings.smaller_is_better, experiment_id=spec.experiment_id
    )
    store = Store(spec.store_path)
    return TrialReporter(
        store, spec.trial_id, spec.experiment_id, retention, metric, settings.smaller_is_better
    )
