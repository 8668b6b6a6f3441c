"""The chief's store writes: every reported training and validation metric and every checkpoint
of one trial, as they happen (so other terminals see them live), for experiment trials and
plain-Python local runs alike.

Registering a checkpoint applies the experiment's retention policy to the trial
(``_retention.register_checkpoint``): a running trial never holds more checkpoints than
``checkpoint_storage`` keeps. ``stop_requested`` is the pause/kill poll, which the loop honours
at the next optimizer-step boundary with a checkpoint.
"""

from __future__ import annotations

import json
import numbers
import os
from typing import Any, Dict, List, Optional

import numpy as np

from determined_lite.experiment._retention import RetentionPolicy, register_checkpoint
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._schedule import is_better
from determined_lite.store import Action

STOP_ACTIONS = (Action.PAUSE, Action.KILL)


def stop_requested(store: Any, experiment_id: int) -> bool:
    """Whether ``pause`` or ``kill`` was asked of the experiment (from any terminal)."""
    return store.pending_action(experiment_id) in STOP_ACTIONS


class StoreReporter(PyTorchCallback):
    """Chief-side callback: metrics and checkpoints of one trial into the store.

    ``experiment_id`` and ``retention``: registering a checkpoint forgets (and removes) the
    trial's checkpoints the policy no longer keeps; without an experiment, nothing is removed.
    """

    def __init__(
        self,
        store: Any,
        trial_id: int,
        experiment_id: Optional[int],
        retention: Optional[RetentionPolicy],
        context: Any = None,
    ) -> None:
        self._store = store
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._retention = retention
        self._context: Any = context
        self._written: Dict[str, str] = {}  # uuid -> directory, until flushed to disk

    def bind(self, context: Any) -> None:
        self._context = context

    def _harness(self) -> Any:
        if self._context is None:
            raise RuntimeError("StoreReporter.bind(context) must be called before training")
        return self._context.harness

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        # A resumed trial re-trains what came after its checkpoint: metrics reported past it by
        # the interrupted run are replaced by the ones this run reports.
        self._store.delete_metrics_after(self._trial_id, first_batch_idx)

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        done = self._harness().state.batches_done
        self._store.add_training_metrics(self._trial_id, done, avg_metrics)
        self._store.update_trial(self._trial_id, total_batches=done)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._store.add_validation_metrics(self._trial_id, self._harness().state.batches_done, metrics)
        settings = self._harness().settings
        value = metrics.get(settings.searcher_metric)  # numpy values reach callbacks, as in Determined
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            best = (self._store.get_trial(self._trial_id) or {}).get("best_validation")
            if is_better(float(value), best, settings.smaller_is_better):
                self._store.update_trial(self._trial_id, best_validation=float(value))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self._written[os.path.basename(os.path.normpath(checkpoint_dir))] = checkpoint_dir

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        # Registered only once flushed to disk: the store never points at a checkpoint that a
        # machine crash could still lose.
        checkpoint_dir = self._written.pop(uuid)
        with open(os.path.join(checkpoint_dir, "metadata.json")) as f:
            metadata = json.load(f)
        total, metrics = metadata["total_batches"], metadata.get("validation_metrics")
        if self._experiment_id is None or self._retention is None:  # no experiment, no policy
            self._store.add_checkpoint(self._trial_id, uuid, checkpoint_dir, total, metrics)
            return
        checkpoint = {
            "trial_id": self._trial_id,
            "uuid": uuid,
            "path": checkpoint_dir,
            "total_batches": total,
            "metrics": metrics,
        }
        register_checkpoint(self._store, self._experiment_id, self._retention, checkpoint)
