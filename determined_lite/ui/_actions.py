"""The dashboard's buttons: pause, activate and kill an experiment, through the CLI's code paths.

Pause and kill are ``experiment._control.control_experiment`` (what ``det-lite experiment
pause|kill`` runs); activate is ``activate_experiment(detach=True)`` (``det-lite experiment
activate --detach``): the same rules (one runner per experiment, only a PAUSED experiment,
or an ACTIVE one whose process died, resumes) and the same messages. With an experiment's labels
and notes (``set_annotations``), these are the dashboard's only writes, on a store of their own
(the pages read through a read-only one).
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any, Dict, List

from determined_lite.experiment import ActivationRefused, activate_experiment
from determined_lite.experiment._control import control_experiment
from determined_lite.store import (
    TERMINAL_STATES,
    Action,
    ExperimentKind,
    ExperimentState,
    NotFoundError,
    Store,
    tensorboard_dir,
)
from determined_lite.tensorboard.serving import logdir_arguments, serve

ACTIONS = ("pause", "activate", "kill")


def available_actions(exp: Dict[str, Any]) -> List[str]:
    """The buttons that apply to ``exp`` (a store row with ``running``): none once it ended;
    activate for a PAUSED one or one whose process died (or to withdraw a pending pause), only
    for experiments det-lite's runner runs; pause for a running one; kill until it ended."""
    if exp["state"] in TERMINAL_STATES:
        return []
    resumable = exp.get("kind", ExperimentKind.EXPERIMENT) == ExperimentKind.EXPERIMENT
    running = exp["state"] == ExperimentState.ACTIVE and bool(exp.get("running"))
    requested = exp.get("requested_action")
    if requested == Action.KILL:
        return []
    if running and requested != Action.PAUSE:
        return ["pause", "kill"]
    return (["activate"] if resumable else []) + ["kill"]


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


MAX_LABELS = 50
MAX_LABEL_CHARS = 100
MAX_NOTES_CHARS = 60000


def _checked_annotations(body: Any) -> Dict[str, Any]:
    """``{"labels"?, "notes"?}`` of a request body, checked: ValueError names what is wrong."""
    if not isinstance(body, dict) or not body or set(body) - {"labels", "notes"}:
        raise ValueError('the body must be a JSON object with "labels" (a list of text), "notes" (text)')
    labels, notes = body.get("labels"), body.get("notes")
    if labels is not None:
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ValueError("labels must be a list of text")
        labels = [x.strip() for x in labels if x.strip()]
        if len(labels) > MAX_LABELS or any(len(x) > MAX_LABEL_CHARS for x in labels):
            raise ValueError(f"at most {MAX_LABELS} labels of at most {MAX_LABEL_CHARS} characters")
    if notes is not None and (not isinstance(notes, str) or len(notes) > MAX_NOTES_CHARS):
        raise ValueError(f"notes must be text of at most {MAX_NOTES_CHARS} characters")
    return {"labels": labels, "notes": notes}


def set_annotations(experiment_id: int, body: Any) -> Dict[str, Any]:
    """Replace the experiment's labels and/or notes (what ``det-lite experiment set labels``
    stores); ``{"experiment_id", "labels", "notes"}`` as saved."""
    fields = _checked_annotations(body)
    store = Store()
    store.experiments.set_annotations(experiment_id, **fields)
    return {"experiment_id": experiment_id, **(store.experiments.annotations(experiment_id) or {})}


class TensorBoards:
    """The dashboard's TensorBoard button: one TensorBoard per experiment, started on first
    press in this process through ``det-lite tensorboard``'s code path (``tensorboard.serving``),
    on the dashboard's host and any free port; later presses answer the same URL."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._urls: Dict[int, str] = {}
        self._lock = threading.Lock()

    def open(self, experiment_id: int) -> Dict[str, Any]:
        """``{"experiment_id", "url"}``; ``NotFoundError`` for an unknown experiment,
        ``ActionRefused`` when it has no event files yet."""
        store = Store()
        if store.experiments.get(experiment_id) is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        logdir = tensorboard_dir(experiment_id, store.home)
        if not os.path.isdir(logdir):
            raise ActionRefused(f"experiment {experiment_id} has no TensorBoard files yet ({logdir})")
        with self._lock:
            if experiment_id not in self._urls:
                self._urls[experiment_id] = serve(logdir_arguments([(experiment_id, logdir)]), 0, self.host)
            return {"experiment_id": experiment_id, "url": self._urls[experiment_id]}


def kill_trial(trial_id: int) -> Dict[str, Any]:
    """Kill one trial, as ``det-lite trial kill`` (``store.requests.kill_trial``: the runner stops
    it, the search goes on); ``{"trial_id", "state", "messages"}`` with the CLI's words."""
    store = Store()
    if not store.requests.kill_trial(trial_id):
        found = store.trials.get(trial_id) or {}
        messages = [f"Trial {trial_id} already ended ({found.get('state')}); nothing to kill."]
    else:
        messages = [f"Killed trial {trial_id}"]
    found = store.trials.get(trial_id) or {}
    return {"trial_id": trial_id, "state": found.get("state"), "messages": messages}
