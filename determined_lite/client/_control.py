"""What the SDK changes: create, pause, kill and activate experiments, through the functions
``det-lite experiment create --detach / pause / kill / activate --detach`` use (the rules live
there, not here)."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import sys
import tempfile
import time
from typing import Any, Dict, Union

import yaml

from determined_lite.client._errors import NotFoundException
from determined_lite.client._session import Session
from determined_lite.store import Action, ActionOutcome, ExperimentState

_CREATED = re.compile(r"^Created experiment (\d+)$", re.MULTILINE)


class ExperimentCreateError(ValueError):
    """det-lite refused the config or the model directory (the message says why)."""


def create(config: Union[str, pathlib.Path, Dict[str, Any]], model_dir: str) -> int:
    """Validate, record and start an experiment in the background, in the store of
    ``$DET_LITE_HOME``; returns its id. det-lite's warnings (unused config fields, which
    ``determined`` the trial imports) go to stderr as the CLI prints them."""
    from determined_lite.experiment import EXIT_OK, create_experiment

    with contextlib.ExitStack() as stack:
        if isinstance(config, dict):
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="det-lite-sdk-"))
            path = os.path.join(directory, "config.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(config, f, sort_keys=False)
        elif isinstance(config, (str, pathlib.Path)):
            path = str(config)
        else:
            raise ValueError("config parameter must be dictionary or path")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            code = create_experiment(path, str(model_dir), detach=True, out=out)
    found = _CREATED.search(out.getvalue())
    if code != EXIT_OK or found is None:
        message = err.getvalue().strip() or out.getvalue().strip() or f"exit code {code}"
        raise ExperimentCreateError(message)
    sys.stderr.write(err.getvalue())
    return int(found.group(1))


def apply(session: Session, experiment_id: int, action: Action) -> ActionOutcome:
    """Pause or kill: a request to the experiment's running process, else the state change
    itself, with what dead processes left reconciled (as ``det-lite experiment pause/kill``)."""
    from determined_lite.experiment._gc import reconcile_experiment

    store = session.store()
    if store.experiments.get(experiment_id) is None:
        raise NotFoundException(f"experiment {experiment_id} not found")
    outcome = store.requests.apply(experiment_id, action)
    if outcome in (ActionOutcome.PAUSED, ActionOutcome.CANCELED):
        reconcile_experiment(store, experiment_id)
    return outcome


def activate(session: Session, experiment_id: int) -> None:
    """Resume a PAUSED experiment in the background (withdraws a pending pause of a running one);
    activating one that already runs does nothing, as in Determined."""
    from determined_lite.experiment import activate_experiment

    found = session.store().experiments.get(experiment_id)
    if found is None:
        raise NotFoundException(f"experiment {experiment_id} not found")
    if (
        found["running"]
        and found["state"] == ExperimentState.ACTIVE
        and found["requested_action"] != Action.PAUSE
    ):
        return
    activate_experiment(experiment_id, detach=True, out=io.StringIO())
    _await_resumed(session, experiment_id)


def _await_resumed(session: Session, experiment_id: int, timeout_s: float = 60.0) -> None:
    """Wait until the background runner has made the experiment ACTIVE again (so that a
    ``wait()`` right after ``activate()`` waits for it, as in Determined), or has stopped."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = session.store().experiments.get(experiment_id)
        if found is None or found["state"] != ExperimentState.PAUSED or not found["running"]:
            return
        time.sleep(0.1)
