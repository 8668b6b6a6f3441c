"""Experiments that share the machine: each runner fills every slot (``DET_LITE_SLOTS``, else
the cores), so two at once oversubscribe the cores and every trial slows down with no word
(issue 29.13). The runner says so once, with the numbers, when it starts a trial (``_runs.py``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from determined_lite.store import ExperimentState, TrialState


def _slots_in_use(experiment: Dict[str, Any], active_trials: int, available: int) -> int:
    """The slots a running experiment's trials take: its active trials' slots, at most the
    machine's (its runner starts no more)."""
    resources = (experiment.get("config") or {}).get("resources") or {}
    slots = int(resources.get("slots_per_trial") or 1)
    return min(active_trials * slots, max(available, slots))


def oversubscription(store: Any, experiment_id: int, wanted: int, available: int) -> Optional[str]:
    """The warning when this experiment's ``wanted`` slots and those other running experiments
    use (from the store) exceed the ``available`` slots; None when they fit."""
    others = []
    for exp in store.experiments.list():
        if exp["id"] == experiment_id or exp["state"] != ExperimentState.ACTIVE or not exp["running"]:
            continue
        active = sum(t["state"] == TrialState.ACTIVE for t in store.trials.list(exp["id"]))
        if active:
            others.append((exp["id"], _slots_in_use(exp, active, available)))
    used = sum(slots for _, slots in others)
    if not others or used + wanted <= available:
        return None
    names = ", ".join(f"experiment {i} ({slots} slots)" for i, slots in others)
    return (
        f"{names} also running: with this one's {wanted}, {used + wanted} slots in use on "
        f"{available} available ($DET_LITE_SLOTS, else the cores); trials share the cores and "
        "run slower"
    )
