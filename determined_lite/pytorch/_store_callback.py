"""The thin adapter between the training loop and ``reporting/``: a chief's ``TrialReporter``
as a ``PyTorchCallback``, the hooks an experiment trial's chief adds to the loop (store writes,
its progress file, the pause/kill poll), and a local run whose chief reports the same way.

The reporter holds the store logic (``reporting/_reporter.py``); this module only maps the
loop's callback events onto its plain methods.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from determined_lite._progress import write_progress
from determined_lite.config import OWN_LENGTH
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._progress import ProgressMeter
from determined_lite.reporting import _local
from determined_lite.reporting._reporter import TrialReporter, trial_reporter
from determined_lite.runtime._spec import WorkerSpec, progress_path


class StoreCallback(PyTorchCallback):
    """Chief-side callback: metrics and checkpoints of a class trial into the store, through its
    ``reporting`` :class:`TrialReporter` (the searcher metric is the harness's)."""

    def __init__(self, reporter: TrialReporter, context: Any = None, own_length: bool = False) -> None:
        self._reporter = reporter
        self._context: Any = context
        self._own_length = own_length  # the searcher sets no length: report the one fit trains to
        self._written: Dict[str, str] = {}  # uuid -> directory, until flushed to disk

    def bind(self, context: Any) -> None:
        self._context = context

    def _harness(self) -> Any:
        if self._context is None:
            raise RuntimeError("StoreCallback.bind(context) must be called before training")
        return self._context.harness

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self._reporter.restart_at(first_batch_idx)
        if self._own_length:  # the loop's plan: max_length in batches, whole optimizer steps
            self._reporter.own_length(self._harness().state.plan.max_batches)

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


def worker_hooks(
    spec: WorkerSpec, is_chief: bool
) -> Tuple[List[Tuple[str, Any]], Optional[Callable[[], bool]]]:
    """Core callbacks writing to the store and the progress file (chief only) and
    ``should_stop`` for pause/kill.

    ``should_stop`` is asked on the chief only; the loop shares its answer with every rank.
    """
    reporter = trial_reporter(spec, is_chief)
    if reporter is None:
        return [], None
    path = progress_path(spec.result_path)
    metric = spec.training_settings().searcher_metric
    meter = ProgressMeter(lambda progress: write_progress(path, progress), metric)
    own = next(iter(spec.max_length.values())) == OWN_LENGTH and not spec.test_mode
    store = StoreCallback(reporter, own_length=own)
    return [("_core.store", store), ("_core.progress", meter)], reporter.stop_requested


class LocalRun(_local.LocalRun):
    """A plain-Python ``Trainer.fit`` recorded in the store, reporting through a :class:`StoreCallback`."""

    def callbacks(self, context: Any) -> List[Tuple[str, Any]]:
        """The chief's core callbacks: metrics and checkpoints into the store."""
        settings = context.harness.settings
        reporter = self.reporter(settings.searcher_metric, settings.smaller_is_better)
        return [("_core.store", StoreCallback(reporter, context))]
