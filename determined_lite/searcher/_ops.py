"""The operations a searcher asks the runner to execute, and the reasons a trial can exit early.

A trial's operations are executed in the order they are emitted. ``ValidateAfter.length`` is the
trial's *total* training length (in ``max_length``'s unit): a promoted ASHA trial resumes from
its checkpoint and trains only the difference.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Union

from determined_lite._enums import TextEnum


class ExitReason(TextEnum):
    """Why a trial stopped before the searcher closed it (argument of ``on_trial_exited_early``)."""

    INVALID_HP = "invalid_hp"  # the trial raised InvalidHP: its hyperparameters are unusable
    ERRORED = "errored"  # the trial failed (after its restarts)
    USER_CANCELED = "user_canceled"  # the user killed the trial


# The module-level names the searcher API has always exported.
INVALID_HP = ExitReason.INVALID_HP
ERRORED = ExitReason.ERRORED
USER_CANCELED = ExitReason.USER_CANCELED
EXIT_REASONS = tuple(reason.value for reason in ExitReason)


@dataclasses.dataclass(frozen=True)
class Create:
    """Start a new trial with these hyperparameters (nested like the config, plain values)."""

    request_id: str
    hparams: Dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ValidateAfter:
    """Train the trial until it has trained ``length`` units in total, validate, and report."""

    request_id: str
    length: int


@dataclasses.dataclass(frozen=True)
class Close:
    """The trial is done (COMPLETED): checkpoint it if needed and release it."""

    request_id: str


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """The search is over; emitted exactly once, after every trial is closed or has exited."""


Operation = Union[Create, ValidateAfter, Close, Shutdown]

_KINDS = {"create": Create, "validate_after": ValidateAfter, "close": Close, "shutdown": Shutdown}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def op_to_dict(op: Operation) -> Dict[str, Any]:
    """A JSON-able form of ``op`` (so a runner can store operations it has not executed yet)."""
    return {"op": _NAMES[type(op)], **dataclasses.asdict(op)}


def op_from_dict(data: Dict[str, Any]) -> Operation:
    """Inverse of :func:`op_to_dict`."""
    fields = dict(data)
    kind = fields.pop("op", None)
    if kind not in _KINDS:
        raise ValueError(f"unknown searcher operation {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind](**fields)
