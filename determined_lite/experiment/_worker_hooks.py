"""What a chief worker of an experiment trial adds to the loop: store writes and the stop poll.

The chief writes every reported training and validation metric and every checkpoint to the
experiment store as they happen (so other terminals see them live), and its progress meter
(``pytorch/_progress.py``) writes the small progress file the runner reads for its progress bar.
Registering a checkpoint applies the experiment's retention policy to the trial
(``_retention.register_checkpoint``): a running trial never holds more checkpoints than
``checkpoint_storage`` keeps. ``should_stop`` answers pause and kill requests, which the loop
honours at the next optimizer-step boundary with a checkpoint.
"""

from __future__ import annotations

import json
import numbers
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from determined_lite._progress import write_progress
from determined_lite.experiment._retention import RetentionPolicy, register_checkpoint
from determined_lite.launch._spec import WorkerSpec, progress_path
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._progress import ProgressMeter
from determined_lite.pytorch._schedule import is_better


class StoreReporter(PyTorchCallback):
    """Chief-side callback: metrics and checkpoints of one trial into the store."""

    def __init__(self, spec: WorkerSpec) -> None:
        from determined_lite.store import Store

        assert spec.trial_id is not None
        self._store = Store(spec.store_path)
        self._trial_id = spec.trial_id
        self._spec = spec
        self._context: Any = None
        self._written: Dict[str, str] = {}  # uuid -> directory, until flushed to disk
        settings = spec.training_settings()
        self._retention = RetentionPolicy.from_config(
            spec.exp_conf, settings.searcher_metric, settings.smaller_is_better
        )

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
        if self._spec.experiment_id is None:  # no experiment, no retention policy
            self._store.add_checkpoint(self._trial_id, uuid, checkpoint_dir, total, metrics)
            return
        checkpoint = {
            "trial_id": self._trial_id,
            "uuid": uuid,
            "path": checkpoint_dir,
            "total_batches": total,
            "metrics": metrics,
        }
        register_checkpoint(self._store, self._spec.experiment_id, self._retention, checkpoint)


def worker_hooks(
    spec: WorkerSpec, is_chief: bool
) -> Tuple[List[Tuple[str, Any]], Optional[Callable[[], bool]]]:
    """Core callbacks writing to the store and the progress file (chief only) and
    ``should_stop`` for pause/kill.

    ``should_stop`` is asked on the chief only; the loop shares its answer with every rank.
    """
    if not is_chief or spec.store_path is None or spec.trial_id is None:
        return [], None
    from determined_lite.store import Action, Store

    reporter = StoreReporter(spec)
    store = Store(spec.store_path)
    experiment_id = spec.experiment_id

    stop_actions = (Action.PAUSE, Action.KILL)

    def should_stop() -> bool:
        return experiment_id is not None and store.pending_action(experiment_id) in stop_actions

    path = progress_path(spec.result_path)
    metric = spec.training_settings().searcher_metric
    meter = ProgressMeter(lambda progress: write_progress(path, progress), metric)
    return [("_core.store", reporter), ("_core.progress", meter)], should_stop
