"""The words the store writes and answers with: experiment and trial states, pause/kill actions.

Each is a ``str`` enum whose value is the exact text in SQLite, in ``--json`` output and in the
CLI's tables: a member compares, hashes, formats and JSON-encodes as that text, and a state read
back from the store (a plain ``str``) equals its member. Renaming a value changes the store
format: ``tests/store/test_states.py`` pins them.
"""

from __future__ import annotations

from typing import Any, Mapping, Type

from determined_lite._enums import TextEnum


class ExperimentState(TextEnum):
    """An experiment's ``state``: ACTIVE runs (or is about to); PAUSED stopped at a checkpoint and
    resumes with ``experiment activate``; the others are terminal (see ``TERMINAL_STATES``)."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"  # killed
    ERROR = "ERROR"


class TrialState(TextEnum):
    """A trial's ``state``; same words and meanings as ``ExperimentState``."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


def check_member(value: str, allowed: Type[TextEnum], what: str) -> str:
    """``value`` as the plain text of its ``allowed`` member; ValueError naming the choices."""
    choices = [member.value for member in allowed]
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}; got {value!r}")
    return allowed(value).value


# What tables show for a COMPLETED trial the searcher closed before its full length (ASHA).
STOPPED_EARLY = "ASHA-stopped"


def trial_display_state(trial: Mapping[str, Any]) -> str:
    """The trial's state as tables show it: ``ASHA-stopped`` for a trial the searcher ended
    early (``stopped_early``), which Determined, and ``--json``, record as COMPLETED."""
    if trial.get("stopped_early") and trial["state"] == TrialState.COMPLETED:
        return STOPPED_EARLY
    return str(trial["state"])


def experiment_display_state(exp: Mapping[str, Any]) -> str:
    """The experiment's state as the CLI's tables and the dashboard show it: a pending request
    or a dead process noted (``ACTIVE (kill requested)``, ``ACTIVE (not running)``)."""
    state = str(exp["state"])
    if state == ExperimentState.ACTIVE and exp.get("requested_action"):
        return f"{state} ({exp['requested_action']} requested)"
    if state == ExperimentState.ACTIVE and exp.get("pid") and not exp.get("running"):
        return f"{state} (not running)"
    return state


# Terminal states stamp ``ended_at``; an experiment in one cannot be activated.
TERMINAL_STATES = frozenset({ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR})


class ExperimentKind(TextEnum):
    """What recorded an experiment: ``det-lite experiment create`` (run by det-lite's runner,
    resumable with ``activate``), a plain-Python ``Trainer.fit`` (one trial; its checkpoints
    are listed and kept by the retention policy like any other, but only Python resumes it) or
    a Core API script's ``core_v2.init()`` outside det-lite (Determined's unmanaged experiment:
    the script records it; running it again with its external ids resumes it)."""

    EXPERIMENT = "experiment"
    LOCAL = "local"
    UNMANAGED = "unmanaged"


class Action(TextEnum):
    """A request to an experiment's processes (``requested_action``), read at the next
    scheduling-unit boundary. A kill replaces a pending pause, never the other way round."""

    PAUSE = "pause"
    KILL = "kill"


class ActionOutcome(TextEnum):
    """What ``store.requests.apply`` did (its docstring says when)."""

    REQUESTED = "requested"
    PAUSED = "paused"
    CANCELED = "canceled"
    NOOP = "noop"
