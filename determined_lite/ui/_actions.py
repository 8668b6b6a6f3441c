"""The dashboard's buttons: pause, activate and kill an experiment, through the CLI's code paths.

Pause and kill are ``experiment._control.control_experiment`` (what ``det-lite experiment
pause|kill`` runs); activate is ``activate_experiment(detach=True)`` (``det-lite experiment
activate --detach``): the same rules (one runner per experiment, only a PAUSED experiment,
or an ACTIVE one whose process died, resumes) and the same messages. These are the dashboard's
only writes, on a store of their own (the pages read through a read-only one).
"""

from __future__ import annotations

import io
from typing import Any, Dict

from determined_lite.experiment import ActivationRefused, activate_experiment
from determined_lite.experiment._control import control_experiment
from determined_lite.store import Action, NotFoundError, Store

ACTIONS = ("pause", "activate", "kill")


class ActionRefused(ValueError):
    """The experiment's state does not allow the action (HTTP 409, the CLI's exit 2)."""


def run_action(experiment_id: int, action: str) -> Dict[str, Any]:
    """Do ``action`` (one of ``ACTIONS``) on the experiment; ``{"experiment_id", "action",
    "state", "messages": [lines]}``. ``NotFoundError`` for an unknown experiment,
    ``ActionRefused`` when the CLI would refuse too, ValueError for an unknown action."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    store = Store()
    if store.experiments.get(experiment_id) is None:
        raise NotFoundError(f"experiment {experiment_id} not found")
    if action == "activate":
        out = io.StringIO()
        try:
            activate_experiment(experiment_id, detach=True, out=out)
        except ActivationRefused as e:
            raise ActionRefused(str(e)) from None
        messages = [line for line in out.getvalue().splitlines() if line.strip()]
    else:
        messages = control_experiment(store, experiment_id, Action(action))
    exp = store.experiments.get(experiment_id)
    return {
        "experiment_id": experiment_id,
        "action": action,
        "state": exp["state"] if exp is not None else None,
        "requested_action": exp["requested_action"] if exp is not None else None,
        "messages": messages,
    }
