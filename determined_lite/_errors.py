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


class InvalidHP(Exception):
    """Raised by a trial whose hyperparameters cannot work; ends that trial, not the experiment
    (``determined_lite.InvalidHP``, ``det.InvalidHP``)."""


class ActionRequired(Exception):
    """The trial cannot go on until the user does something; running it again would fail alike.

    Its message says what happened and what to do, in one line.
    """


class TrialCheckError(Exception):
    """det-lite checked what the trial gave it (its outputs, its use of the API) and found it
    wrong: running the trial again would fail alike, so an experiment does not restart it.

    Subclasses also derive from the builtin error Determined raises in the same place (e.g.
    ``KeyError``), so code that catches that keeps working. ``every_trial``: every trial of a
    search would fail it alike (the trial's code and config, not its hyperparameter values),
    so the first one stops the search.
    """

    every_trial = True


class MissingMetricError(TrialCheckError, KeyError):
    """A metric det-lite needs (the searcher metric) is not among those the trial returned."""

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class MetricTypeError(TrialCheckError, TypeError):
    """A metric the trial returned has a type det-lite cannot use there (not a number, not JSON)."""


class OutputTypeError(TrialCheckError, TypeError):
    """A trial method returned a value of the wrong type (``train_batch`` returning None or a
    string, ``evaluate_batch`` not returning a dict): Determined raises ``TypeError`` there."""


class UndefinedHParamError(TrialCheckError, ValueError):
    """``context.get_hparam`` of a name the experiment does not define (a typo): every trial has
    the same names, so every trial would fail alike (Determined raises ``ValueError``)."""


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


# --- Determined's exception classes (``determined.errors``) --------------------------------
# det-lite raises some of them itself (or errors deriving from them), so the hierarchy lives
# here and the ``determined`` alias re-exports it. As in Determined, InvalidExperimentException
# derives from BaseException.


class EnterpriseOnlyError(Exception):
    """A feature of Determined's enterprise edition."""


class InternalException(Exception):
    """An internal error of the harness."""


class InvalidExperimentException(BaseException):
    """The experiment (its config or code) is invalid."""


class InvalidDataTypeException(InvalidExperimentException):
    """The trial returned data of a type the harness cannot use."""


class InvalidConfigurationException(InvalidExperimentException):
    """The experiment configuration is invalid."""


class InvalidModelException(InvalidExperimentException):
    """The model definition is invalid."""


class InvalidCheckpointException(Exception):
    """A checkpoint cannot be used."""


class StopLoadingImplementation(Exception):
    """Raised by code that stops loading a trial implementation on purpose."""


class WorkerError(Exception):
    """A worker of the trial failed."""


class WorkerFinishedGracefully(Exception):
    """A worker ended on request."""


class SkipWorkloadException(Exception):
    """The current workload is skipped."""


class CheckpointNotFound(Exception):
    """No checkpoint matches what was asked for."""


class CheckpointStateException(Exception):
    """A checkpoint is in a state that does not allow the operation."""


class NoDirectStorageAccess(Exception):
    """Checkpoint storage cannot be reached directly."""


class ProxiedDownloadFailed(Exception):
    """A proxied checkpoint download failed."""


class MultipleDownloadsFailed(Exception):
    """Several checkpoint downloads failed."""


DETERMINED_ERRORS = (
    "EnterpriseOnlyError",
    "InternalException",
    "InvalidExperimentException",
    "InvalidDataTypeException",
    "InvalidConfigurationException",
    "InvalidModelException",
    "InvalidCheckpointException",
    "StopLoadingImplementation",
    "WorkerError",
    "WorkerFinishedGracefully",
    "SkipWorkloadException",
    "CheckpointNotFound",
    "CheckpointStateException",
    "NoDirectStorageAccess",
    "ProxiedDownloadFailed",
    "MultipleDownloadsFailed",
)


# --- det-lite's errors that are also the error Determined raises in the same place ----------


class TrainingNotStartedError(InternalException, RuntimeError):
    """Epoch or batch information asked for before the first training batch (Determined:
    ``InternalException("Training hasn't started.")``)."""


class NotADataLoaderError(TrialCheckError, TypeError, RuntimeError):
    """``build_*_data_loader()`` returned something other than det-lite's ``DataLoader`` without
    ``disable_dataset_reproducibility_checks()`` (Determined raises ``RuntimeError``)."""


class ReducerUseError(TrialCheckError, AssertionError, ValueError):
    """A custom reducer broke the name/dict rule or was wrapped twice (Determined: ``AssertionError``)."""


class EvaluationReducerError(TrialCheckError, InvalidExperimentException, TypeError):
    """``evaluation_reducer()`` returned no Reducer for a metric (an empty dict, a dict lacking
    one) or something that is not a Reducer (Determined: ``InvalidExperimentException``)."""


class ReducerTypeError(TrialCheckError, AssertionError, TypeError):
    """``wrap_reducer`` got neither a function nor a ``MetricReducer`` (Determined: ``AssertionError``)."""


class DataLengthError(ValueError, TypeError):
    """``data_length`` found no tensor or array to count (Determined: ``TypeError`` for a value
    of the wrong type, ``ValueError`` for an empty container)."""


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
    "DETERMINED_ERRORS",
    "DISK_FULL_ERRNOS",
    "DataLengthError",
    "NotADataLoaderError",
    "ReducerTypeError",
    "EvaluationReducerError",
    "ReducerUseError",
    "TrainingNotStartedError",
    "ActionRequired",
    "DiskFullError",
    "MetricTypeError",
    "MissingMetricError",
    "OutputTypeError",
    "TrialCheckError",
    "UndefinedHParamError",
    *DETERMINED_ERRORS,
    "find_action_required",
    "find_trial_check",
    "is_disk_full",
]
