"""Errors a restart cannot fix, the one rule for "the disk is full", and the one way det-lite's
commands print an error or a warning (``det-lite: error: ...``).

:class:`TrialCheckError`: det-lite's check of what the trial returned failed; the trial ends in
ERROR at once, not restarted.

A trial that fails because its checkpoint volume is full, or because a checkpoint it must
resume from is not trusted, would fail the same way on every restart. Such errors are
:class:`ActionRequired`: an experiment's runner does not restart the trial but pauses the
experiment, whose last complete checkpoint stays resumable with
``det-lite experiment activate`` once the cause is fixed. Standard library only.
"""

from __future__ import annotations

import difflib
import errno
import shutil
from typing import Iterator, Optional, Sequence

ERROR_PREFIX = "det-lite: error: "
WARNING_PREFIX = "det-lite: warning: "


def error_line(message: str) -> str:
    """``det-lite: error: <message>``: how every det-lite command reports an error (stderr)."""
    return ERROR_PREFIX + message


def warning_line(message: str) -> str:
    """``det-lite: warning: <message>``."""
    return WARNING_PREFIX + message


def did_you_mean(name: str, candidates: Sequence[str]) -> str:
    """``; did you mean 'Trial'?`` for the closest of ``candidates`` to a mistyped ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# errno values meaning "no room left": a full volume, or the user's quota on it.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class ActionRequired(Exception):
    """The trial cannot go on until the user does something; running it again would fail alike.

    Its message says what happened and what to do, in one line.
    """


class TrialCheckError(Exception):
    """det-lite checked what the trial gave it (its outputs, its use of the API) and found it
    wrong: running the trial again would fail alike, so an experiment does not restart it.

    Subclasses also derive from the builtin error Determined raises in the same place (e.g.
    ``KeyError``), so code that catches that keeps working.
    """


class MissingMetricError(TrialCheckError, KeyError):
    """A metric det-lite needs (the searcher metric) is not among those the trial returned."""

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class MetricTypeError(TrialCheckError, TypeError):
    """A metric the trial returned has a type det-lite cannot use there (not a number, not JSON)."""


def find_trial_check(error: BaseException) -> Optional[TrialCheckError]:
    """The :class:`TrialCheckError` that ``error`` is or wraps."""
    return next((e for e in _chain(error) if isinstance(e, TrialCheckError)), None)


class DiskFullError(ActionRequired, OSError):
    """No space left on ``path``: an ``OSError`` with ``errno.ENOSPC`` whose text is one line,
    ``no space left on <path>`` followed by what could not be written."""

    def __init__(self, path: str, detail: str = "") -> None:
        message = f"no space left on {path}" + (f": {detail}" if detail else "")
        OSError.__init__(self, errno.ENOSPC, message)
        self.path, self.detail = path, detail

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple:  # OSError would pickle its (errno, strerror) arguments
        return (type(self), (self.path, self.detail))


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from or while handling, newest first."""
    seen = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def find_action_required(error: BaseException) -> Optional[ActionRequired]:
    """The :class:`ActionRequired` that ``error`` is or wraps (e.g. in a ``CallbackError``)."""
    return next((e for e in _chain(error) if isinstance(e, ActionRequired)), None)


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from or during) says that a volume is full.

    ``OSError``\\ s carry their errno; ``shutil.copytree`` reports the errors of the files it
    could not copy only as text, ``[Errno 28] ...``.
    """
    for current in _chain(error):
        if isinstance(current, DiskFullError):
            return True
        if isinstance(current, shutil.Error) and _copy_errors_say_full(current):
            return True
        if isinstance(current, OSError) and current.errno in DISK_FULL_ERRNOS:
            return True
    return False


def _copy_errors_say_full(error: shutil.Error) -> bool:
    entries = error.args[0] if error.args and isinstance(error.args[0], list) else []
    marks = tuple(f"[Errno {code}]" for code in DISK_FULL_ERRNOS)
    return any(isinstance(e, tuple) and str(e[-1]).startswith(marks) for e in entries)


__all__ = [
    "DISK_FULL_ERRNOS",
    "ActionRequired",
    "DiskFullError",
    "MetricTypeError",
    "MissingMetricError",
    "TrialCheckError",
    "find_action_required",
    "find_trial_check",
    "is_disk_full",
]
