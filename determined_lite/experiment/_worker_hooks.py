"""What a chief worker of an experiment trial adds to the loop: store writes, its progress file
and the stop poll.

The chief writes metrics and checkpoints to the experiment store (``_store_reporter.py``) and
its progress meter (``pytorch/_progress.py``) writes the small progress file the runner reads
for its progress bar. ``should_stop`` answers pause and kill requests.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from determined_lite._progress import write_progress
from determined_lite.experiment._retention import RetentionPolicy
from determined_lite.experiment._store_reporter import StoreReporter, TrialReporter
from determined_lite.launch._spec import WorkerSpec, progress_path
from determined_lite.pytorch._progress import ProgressMeter


def trial_reporter(spec: WorkerSpec, is_chief: bool) -> Optional[TrialReporter]:
    """The chief's writer of the trial's metrics and checkpoints to the experiment store (None
    on other ranks and outside experiments)."""
    if not is_chief or spec.store_path is None or spec.trial_id is None:
        return None
    from determined_lite.store import Store

    settings = spec.training_settings()
    metric = settings.searcher_metric
    retention = RetentionPolicy.from_config(spec.exp_conf, metric, settings.smaller_is_better)
    store = Store(spec.store_path)
    return TrialReporter(
        store, spec.trial_id, spec.experiment_id, retention, metric, settings.smaller_is_better
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
    return [("_core.store", StoreReporter(reporter)), ("_core.progress", meter)], reporter.stop_requested
