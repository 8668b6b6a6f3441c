"""Pause and kill an experiment from another process, with the words the user reads.

One code path for ``det-lite experiment pause|kill`` and the dashboard's buttons: the store's
``store.requests.apply`` (a request to a live runner, else the state change itself), then, when no
process was running the experiment, ``reconcile_experiment`` registers or removes what its dead
processes left.
"""

from __future__ import annotations

from typing import List

from determined_lite.experiment._gc import reconcile_experiment
from determined_lite.store import Action, ActionOutcome, Store


def control_experiment(store: Store, experiment_id: int, action: Action) -> List[str]:
    """Pause or kill ``experiment_id`` (``NotFoundError`` when unknown); returns the lines to show."""
    outcome = store.requests.apply(experiment_id, action)
    lines: List[str] = []
    if outcome in (ActionOutcome.PAUSED, ActionOutcome.CANCELED):
        lines += reconcile_experiment(store, experiment_id).lines()
    if outcome == ActionOutcome.REQUESTED:
        lines.append(
            f"Requested {action} of experiment {experiment_id}; its trials stop at the next "
            "scheduling-unit boundary" + (" with a checkpoint." if action == Action.PAUSE else ".")
        )
    elif outcome == ActionOutcome.NOOP:
        exp = store.experiments.get(experiment_id)
        state = exp["state"] if exp is not None else "gone"
        lines.append(f"Experiment {experiment_id} is already {state}; nothing to do.")
    else:
        lines.append(f"Experiment {experiment_id} had no running process; it is now {outcome.upper()}.")
    return lines
