"""Which checkpoints a ``checkpoint_storage`` policy keeps (Determined's save_* counts), and
removing the others from the disk and the store.

The policy applies as checkpoints are registered, not only when trials end: the chief worker
of a trial applies it to its own trial right after registering each checkpoint (the store
registers the new one and forgets the ones it replaces in one transaction), and the runner
applies it to the whole experiment when a trial finishes or pauses and when the experiment
ends. A trial that may still train keeps its latest registered checkpoint, the one it resumes
from; a checkpoint still being written is not registered yet, so nothing here can remove it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

from determined_lite.storage import CLOUD_TYPES, CheckpointStorage, StorageError, checkpoint_storage

logger = logging.getLogger("determined_lite")

# Determined's defaults (the config schema fills them in; these cover partial configs).
DEFAULT_SAVE_TRIAL_BEST = 1
DEFAULT_SAVE_TRIAL_LATEST = 1
DEFAULT_SAVE_EXPERIMENT_BEST = 0


def _metric(checkpoint: Dict[str, Any], metric: Optional[str]) -> Optional[float]:
    values = checkpoint.get("metrics") or {}
    value = values.get(metric) if metric else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def best_checkpoints(
    checkpoints: Iterable[Dict[str, Any]], n: int, metric: Optional[str], smaller: bool
) -> List[str]:
    """UUIDs of the ``n`` checkpoints with the best ``metric`` (ties: the later one); checkpoints
    without a number for it are never best."""
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
        keep.update(best_checkpoints(checkpoints, save_trial_best, metric, smaller_is_better))
    every = [c for cs in by_trial.values() for c in cs]
    keep.update(best_checkpoints(every, save_experiment_best, metric, smaller_is_better))
    return keep


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """``checkpoint_storage``'s save_* counts and the searcher metric that ranks checkpoints."""

    metric: Optional[str]
    smaller_is_better: bool
    save_trial_best: int = DEFAULT_SAVE_TRIAL_BEST
    save_trial_latest: int = DEFAULT_SAVE_TRIAL_LATEST
    save_experiment_best: int = DEFAULT_SAVE_EXPERIMENT_BEST
    # Where dropped checkpoints are deleted besides their local directory (a cloud store).
    storage: Optional[CheckpointStorage] = dataclasses.field(default=None, compare=False)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        metric: Optional[str],
        smaller_is_better: bool,
        experiment_id: Optional[int] = None,
    ) -> "RetentionPolicy":
        """The policy of ``config``; with ``experiment_id``, it also deletes from a cloud store."""
        storage = config.get("checkpoint_storage") or {}
        remote = None
        if experiment_id is not None and storage.get("type") in CLOUD_TYPES:
            remote = checkpoint_storage(config, experiment_id)
        return cls(
            storage=remote,
            metric=metric,
            smaller_is_better=smaller_is_better,
            save_trial_best=int(storage.get("save_trial_best", DEFAULT_SAVE_TRIAL_BEST)),
            save_trial_latest=int(storage.get("save_trial_latest", DEFAULT_SAVE_TRIAL_LATEST)),
            save_experiment_best=int(storage.get("save_experiment_best", DEFAULT_SAVE_EXPERIMENT_BEST)),
        )

    def to_drop(
        self, checkpoints: Sequence[Dict[str, Any]], unfinished_trials: Iterable[int]
    ) -> List[Dict[str, Any]]:
        """The checkpoints (rows as the store lists them) that the policy does not keep."""
        by_trial: Dict[int, List[Dict[str, Any]]] = {}
        for c in checkpoints:
            by_trial.setdefault(c["trial_id"], []).append(c)
        keep = checkpoints_to_keep(
            by_trial,
            metric=self.metric,
            smaller_is_better=self.smaller_is_better,
            save_trial_best=self.save_trial_best,
            save_trial_latest=self.save_trial_latest,
            save_experiment_best=self.save_experiment_best,
            unfinished_trials=unfinished_trials,
        )
        return [c for c in checkpoints if c["uuid"] not in keep]


def remove_checkpoint_dir(checkpoint: Dict[str, Any], storage: Optional[CheckpointStorage] = None) -> None:
    """Remove a dropped checkpoint's directory (only a directory named by its uuid is ours) and
    its copy in ``storage``."""
    if storage is not None:
        try:
            storage.delete(checkpoint["uuid"])
        except StorageError as e:  # forgotten already: `det-lite checkpoint gc` removes it later
            logger.warning("%s (checkpoint gc removes it later)", e)
    path = checkpoint["path"]
    if os.path.basename(os.path.normpath(path)) == checkpoint["uuid"] and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)


def apply_retention(
    store: Any, experiment_id: int, policy: RetentionPolicy, unfinished_trials: Iterable[int]
) -> int:
    """Drop the experiment's checkpoints the policy does not keep, from the store then the disk;
    returns how many. ``unfinished_trials`` keep their latest checkpoint."""
    dropped = policy.to_drop(store.checkpoints.list(experiment_id=experiment_id), unfinished_trials)
    registered = store.checkpoints.registered(experiment_id)  # a model version's: kept
    dropped = [c for c in dropped if c["uuid"] not in registered]
    for c in dropped:
        store.checkpoints.delete(c["uuid"])
        remove_checkpoint_dir(c, policy.storage)
    return len(dropped)


def register_checkpoint(
    store: Any,
    experiment_id: int,
    policy: RetentionPolicy,
    checkpoint: Dict[str, Any],
) -> List[Dict[str, Any]]:
    """In the chief: register ``checkpoint`` (``trial_id, uuid, path, total_batches, metrics``)
    and forget, in the same store transaction, the checkpoints of its trial that the policy no
    longer keeps; then remove their directories. Returns the dropped checkpoints.

    Other trials' checkpoints are left to their own chiefs and to the runner. Deciding from a
    slightly older list is safe: a checkpoint the policy drops stays dropped as more arrive.
    """
    trial_id = checkpoint["trial_id"]
    current = [
        c for c in store.checkpoints.list(experiment_id=experiment_id) if c["uuid"] != checkpoint["uuid"]
    ]
    candidates = current + [dict(checkpoint, experiment_id=experiment_id)]
    dropped = [c for c in policy.to_drop(candidates, [trial_id]) if c["trial_id"] == trial_id]
    registered = store.checkpoints.registered(experiment_id)  # a model version's: kept
    # The new checkpoint (the latest) is always kept.
    dropped = [c for c in dropped if c["uuid"] != checkpoint["uuid"] and c["uuid"] not in registered]
    store.checkpoints.add(
        trial_id,
        checkpoint["uuid"],
        checkpoint["path"],
        checkpoint["total_batches"],
        checkpoint.get("metrics"),
        replaces=[c["uuid"] for c in dropped],
    )
    for c in dropped:
        remove_checkpoint_dir(c, policy.storage)
    return dropped
