"""Which checkpoints a ``checkpoint_storage`` policy keeps (Determined's save_* counts)."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Set


def _metric(checkpoint: Dict[str, Any], metric: Optional[str]) -> Optional[float]:
    values = checkpoint.get("metrics") or {}
    value = values.get(metric) if metric else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _best(checkpoints: Iterable[Dict[str, Any]], n: int, metric: Optional[str], smaller: bool) -> List[str]:
    scored = [
        (v, c["total_batches"], c["uuid"]) for c in checkpoints if (v := _metric(c, metric)) is not None
    ]
    # Ties go to the later checkpoint: it carries more training.
    scored.sort(key=lambda t: ((t[0] if smaller else -t[0]), -t[1]))
    return [uuid for _, _, uuid in scored[:n]]


def checkpoints_to_keep(
    by_trial: Dict[int, List[Dict[str, Any]]],
    *,
    metric: Optional[str],
    smaller_is_better: bool,
    save_trial_best: int,
    save_trial_latest: int,
    save_experiment_best: int,
    unfinished_trials: Iterable[int] = (),
) -> Set[str]:
    """UUIDs kept: each trial's latest N and best N, the experiment's best N (by the searcher metric).

    A trial that may still train (running, paused, or to be promoted) keeps its latest
    checkpoint whatever the policy says: it resumes from it.
    """
    keep: Set[str] = set()
    unfinished = set(unfinished_trials)
    for trial_id, checkpoints in by_trial.items():
        ordered = sorted(checkpoints, key=lambda c: c["total_batches"], reverse=True)
        latest = max(save_trial_latest, 1 if trial_id in unfinished else 0)
        keep.update(c["uuid"] for c in ordered[:latest])
        keep.update(_best(checkpoints, save_trial_best, metric, smaller_is_better))
    every = [c for cs in by_trial.values() for c in cs]
    keep.update(_best(every, save_experiment_best, metric, smaller_is_better))
    return keep
