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


class TrialReporter:
    """One trial's store writes, as its chief reports them: the one writer that class trials
    (through :class:`StoreReporter`) and Core API scripts (``determined_lite.core``) share.

    ``experiment_id`` and ``retention``: registering a checkpoint forgets (and removes) the
    trial's checkpoints the policy no longer keeps; without an experiment, nothing is removed.
    """

    def __init__(
        self,
        store: Any,
        trial_id: int,
        experiment_id: Optional[int],
        retention: Optional[RetentionPolicy],
        metric: Optional[str] = None,
        smaller_is_better: bool = True,
    ) -> None:
        self.store = store
        self.trial_id = trial_id
        self.experiment_id = experiment_id
        self._retention = retention
        self._metric = metric
        self._smaller_is_better = smaller_is_better

    def restart_at(self, batches: int) -> None:
        """A resumed trial re-trains what came after its checkpoint: metrics reported past it by
        the interrupted run are replaced by the ones this run reports."""
        self.store.delete_metrics_after(self.trial_id, batches)

    def training(self, batches: int, metrics: Dict[str, Any]) -> None:
        self.store.add_training_metrics(self.trial_id, batches, metrics)
        self.store.update_trial(self.trial_id, total_batches=batches)

    def validation(self, batches: int, metrics: Dict[str, Any]) -> None:
        """Record a validation; the trial's best searcher metric follows it."""
        self.store.add_validation_metrics(self.trial_id, batches, metrics)
        value = metrics.get(self._metric) if self._metric is not None else None
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            best = (self.store.get_trial(self.trial_id) or {}).get("best_validation")
            if is_better(float(value), best, self._smaller_is_better):
                self.store.update_trial(self.trial_id, best_validation=float(value))

    def checkpoint(
        self, uuid: str, checkpoint_dir: str, total_batches: int, metrics: Optional[Dict[str, Any]]
    ) -> None:
        """Register a checkpoint written (and flushed) to ``checkpoint_dir``."""
        if self.experiment_id is None or self._retention is None:  # no experiment, no policy
            self.store.add_checkpoint(self.trial_id, uuid, checkpoint_dir, total_batches, metrics)
            return
        checkpoint = {
            "trial_id": self.trial_id,
            "uuid": uuid,
            "path": checkpoint_dir,
            "total_batches": total_batches,
            "metrics": metrics,
        }
        register_checkpoint(self.store, self.experiment_id, self._retention, checkpoint)

    def stop_requested(self) -> bool:
        """Whether ``pause`` or ``kill`` was asked of the trial's experiment."""
        return self.experiment_id is not None and stop_requested(self.store, self.experiment_id)


class StoreReporter(PyTorchCallback):
    """Chief-side callback: metrics and checkpoints of a class trial into the store, through its
    :class:`TrialReporter` (the searcher metric is the harness's)."""

    def __init__(self, reporter: TrialReporter, context: Any = None) -> None:
        self._reporter = reporter
        self._context: Any = context
        self._written: Dict[str, str] = {}  # uuid -> directory, until flushed to disk

    def bind(self, context: Any) -> None:
        self._context = context

    def _harness(self) -> Any:
        if self._context is None:
            raise RuntimeError("StoreReporter.bind(context) must be called before training")
        return self._context.harness

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self._reporter.restart_at(first_batch_idx)

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self._reporter.training(self._harness().state.batches_done, avg_metrics)

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        # numpy values reach callbacks, as in Determined
        self._reporter.validation(self._harness().state.batches_done, metrics)

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self._written[os.path.basename(os.path.normpath(checkpoint_dir))] = checkpoint_dir

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        # Registered only once flushed to disk: the store never points at a checkpoint that a
        # machine crash could still lose.
        checkpoint_dir = self._written.pop(uuid)
        with open(os.path.join(checkpoint_dir, "metadata.json")) as f:
            metadata = json.load(f)
        self._reporter.checkpoint(
            uuid, checkpoint_dir, metadata["total_batches"], metadata.get("validation_metrics")
        )
