"""Failure records and files: how a worker (or a launcher's agent) says how it ended.

Whatever tells how a worker ended — an error the worker recorded, torch's error files, an exit
status horovodrun printed — becomes a :class:`WorkerFailure`; the launchers pick the one that
caused the others (``launch/_failures.py``). The files, JSON objects of
:meth:`WorkerFailure.to_json` written whole with :func:`write_failure`:

- ``<result>.failure.rank<N>.json``: worker ``N`` of a Horovod trial records the error it
  raised there (``rank``, ``error``, ``traceback``, ``timestamp``); the horovodrun wrapper sets
  ``$DET_LITE_HOROVOD_FAILURE_PREFIX`` to ``<result>.failure`` (:func:`worker_failure_prefix`).
- ``<result>.node<I>.failure.json``: the torchrun agent on host ``I`` of a multi-host trial
  records the first failure of its workers there, for the process supervising the agents.
- ``<result>.no-restart.rank<N>.json``: worker ``N`` (any engine) failed with an error a restart
  would meet again (:class:`NoRestart`); the runner then ends the trial instead of restarting it.
- ``<result>.failed-at.rank<N>.json``: where worker ``N`` saw the trial fail (:class:`FailurePoint`:
  the failing rank, the error, the batch, the place); the runner compares it with the previous
  run's to stop a failure that recurs.

Worker-side (``distributed/`` records here) and standard library only: launchers run without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import json
import logging
import os
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Union

from determined_lite._enums import TextEnum

logger = logging.getLogger("determined_lite")

# Set by the horovodrun wrapper for its workers: where a failing worker records its error.
FAILURE_PREFIX_ENV = "DET_LITE_HOROVOD_FAILURE_PREFIX"

# --- the record of one failure -----------------------------------------------------------------


@dataclasses.dataclass
class WorkerFailure:
    """How one worker ended, or (``rank`` None) the launcher's agent on ``node``.

    ``error``: ``ExceptionType: message``, recorded by the worker that raised it; ``signal``:
    the name of the signal that ended the process; ``timestamp``: when it failed (any clock the
    failures compared share: epoch seconds, or the order in which a launcher saw them end).
    """

    rank: Union[int, str, None] = None
    error: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    timestamp: Optional[float] = None
    node: Optional[str] = None
    local_rank: Optional[int] = None
    traceback: Optional[str] = None

    @classmethod
    def of_error(cls, error: BaseException, rank: int) -> "WorkerFailure":
        """The record of worker ``rank`` failing with ``error`` now (its first line names it)."""
        message = str(error).strip()
        return cls(
            rank=rank,
            error=f"{type(error).__name__}: {message.splitlines()[0]}" if message else type(error).__name__,
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
            timestamp=time.time(),
        )

    def to_json(self) -> Dict[str, Any]:
        """The failure file's JSON object: the fields that are set."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "WorkerFailure":
        if not isinstance(data, dict):
            raise ValueError(f"a failure record is a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def describe(self, agent: str = "launcher") -> str:
        """The result's error: ``rank N: ExceptionType: message`` / ``rank N: killed by SIGKILL``
        / ``rank N: exited with code C``; without a rank, ``AGENT on NODE: ...``."""
        if self.rank is not None:
            who = f"rank {self.rank}"
        else:
            who = f"{agent} on {self.node}" if self.node else agent
        if self.error:
            return f"{who}: {self.error}"
        if self.signal:
            return f"{who}: killed by {self.signal}"
        return f"{who}: exited with code {self.exit_code}"

    def summary(self, where: str = "") -> str:
        """The launcher's one line about a failed worker (``where``: `` on HOST``); the error
        itself is already above, in the worker's output (a traceback or det-lite's one line)."""
        if self.error:
            code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
            what = f"failed{code}; its error is above"
        elif self.signal:
            what = f"was killed by {self.signal}"
        else:
            what = f"exited with code {self.exit_code}"
        return f"det-lite: worker rank {self.rank}{where} {what}; stopped the other workers"


# --- failure files -----------------------------------------------------------------------------


def worker_failure_prefix(result_path: str) -> str:
    """Prefix of the files in which failing workers record their error (beside the result)."""
    return f"{result_path}.failure"


def worker_failure_file(prefix: str, rank: int) -> str:
    """The file in which worker ``rank`` records the error it failed with."""
    return f"{prefix}.rank{rank}.json"


def agent_failure_file(result_path: str, node: int) -> str:
    """The file in which the agent on host ``node`` records the first failure of its workers."""
    return f"{result_path}.node{node}.failure.json"


def write_failure(path: str, failure: WorkerFailure) -> None:
    """Write ``failure`` to ``path`` whole (a reader never sees half a record)."""
    write_failure_json(path, failure.to_json())


def write_failure_json(path: str, data: Dict[str, Any]) -> None:
    """Write a failure file whole (a reader never sees half a record)."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _not_recorded(path: str, error: OSError) -> None:
    """A failure file that could not be written: a warning, unless the disk is full (the store
    reports that in one line; a warning per worker would only bury it)."""
    log = logger.debug if error.errno == errno.ENOSPC else logger.warning
    log("could not record this worker's error in %s: %s", path, error)


def record_worker_failure(error: BaseException, rank: int) -> None:
    """In a worker: record ``error`` where the launcher looks for it, ``$DET_LITE_HOROVOD_FAILURE_PREFIX``
    (nothing when no launcher asked for it)."""
    prefix = os.environ.get(FAILURE_PREFIX_ENV)
    if not prefix:
        return
    path = worker_failure_file(prefix, rank)
    try:
        write_failure(path, WorkerFailure.of_error(error, rank))
    except OSError as e:  # reporting must not hide the error being reported
        _not_recorded(path, e)


def read_failures(paths: Sequence[str]) -> List[WorkerFailure]:
    """The failures recorded in ``paths``; missing and unreadable files are passed over."""
    failures = []
    for path in paths:
        try:
            with open(path) as f:
                failures.append(WorkerFailure.from_json(json.load(f)))
        except (OSError, ValueError, TypeError):
            continue
    return failures


def read_worker_failures(prefix: str) -> List[WorkerFailure]:
    """The errors the workers recorded under ``prefix``."""
    return read_failures(sorted(glob.glob(glob.escape(prefix) + ".rank*.json")))


def remove_failures(paths: Sequence[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def remove_worker_failures(prefix: str) -> None:
    """Remove the workers' records under ``prefix``, half-written ones included."""
    remove_failures(glob.glob(glob.escape(prefix) + ".rank*.json*"))


# --- errors a restart would meet again ---------------------------------------------------------


class FailureKind(TextEnum):
    """Why a failed trial is not restarted. A crash after progress (or a death by a signal) is
    restarted up to ``max_restarts`` times and records nothing."""

    BEFORE_PROGRESS = "before_progress"  # raised before this run completed a batch
    BEFORE_REPORT = "before_report"  # a script raised before it reported progress past its start
    SCRIPT_RAISED = "script_raised"  # a Core API script's own code raised it (see own_code_error)
    TRIAL_CHECK = "trial_check"  # det-lite's check of the trial (TrialCheckError), every trial's
    TRIAL_CHECK_ONE = "trial_check_one"  # one that may depend on the hyperparameter values
    NO_ROOM = "no_room"  # the Ray cluster never offered the gang's slots (placement_timeout)


_KIND_REASONS = {
    FailureKind.BEFORE_PROGRESS: "it failed before completing a batch, so a restart would fail alike",
    FailureKind.BEFORE_REPORT: (
        "the script failed before it reported any training progress past its start, so a restart "
        "would fail alike"
    ),
    FailureKind.SCRIPT_RAISED: (
        "the script's own code raised it, not the machine or the network (no I/O, memory or "
        "connection error), so a restart from its checkpoint would fail alike"
    ),
    FailureKind.TRIAL_CHECK: "det-lite's check of the trial failed, so a restart would fail alike",
    FailureKind.TRIAL_CHECK_ONE: "det-lite's check of the trial failed, so a restart would fail alike",
    FailureKind.NO_ROOM: "the cluster never had room for its slots, so a restart would wait alike",
}


# Errors the machine, the network or another process may cause, which a restart may not meet.
TRANSIENT_ERRORS = (OSError, MemoryError, EOFError)


def own_code_error(error: BaseException, code_dir: str) -> bool:
    """Whether ``error`` is one a Core API script's own code raised (its innermost frame is in
    ``code_dir``, the trial's context) for a reason of its own: not an I/O, memory or network
    error (:data:`TRANSIENT_ERRORS`), nor raised from or while handling one. Its loop replays
    the same steps from the same checkpoint, so such an error recurs: it is not retried."""
    frames = traceback.extract_tb(error.__traceback__)
    root = os.path.realpath(code_dir) + os.sep
    if not frames or not os.path.realpath(frames[-1].filename).startswith(root):
        return False
    seen: List[BaseException] = []
    cause: Optional[BaseException] = error
    while cause is not None and cause not in seen:
        if isinstance(cause, TRANSIENT_ERRORS):
            return False
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return True


@dataclasses.dataclass
class NoRestart:
    """Worker ``rank`` failed with ``error`` (``Type: first line``) of kind ``kind``."""

    rank: int
    kind: FailureKind
    error: str

    def reason(self) -> str:
        return f"rank {self.rank}: {self.error}: {_KIND_REASONS[self.kind]}"

    def failed_line(self) -> str:
        """What follows ``trial N failed: `` when the worker printed the error itself just above
        (its traceback, or ``det-lite: Type: message``): the error's type, not its text again,
        and why the trial is not restarted."""
        kind = self.error.partition(":")[0]
        return f"rank {self.rank}: {kind} (above); not restarted: {_KIND_REASONS[self.kind]}"

    @property
    def fails_every_trial(self) -> bool:
        """det-lite's check of the trial's code (a typo, a metric it never gives): every trial of
        the search would fail it alike. Errors that may depend on the hyperparameters (InvalidHP,
        a NaN for one lr, anything before the first batch, a compiled graph's shape) are not."""
        return self.kind is FailureKind.TRIAL_CHECK

    def search_stop(self, trial_id: int) -> str:
        """The one line that stops a search after trial ``trial_id`` failed det-lite's check."""
        return (
            f"stopping the search: trial {trial_id} failed det-lite's check "
            f"({self.error.partition(':')[0]}, above), which every trial would fail alike; fix it "
            "and create the experiment again"
        )


def no_restart_file(result_path: str, rank: int) -> str:
    return f"{result_path}.no-restart.rank{rank}.json"


def record_no_restart(result_path: str, record: NoRestart) -> None:
    """In a worker: say that the trial should not be restarted (beside its result)."""
    path = no_restart_file(result_path, record.rank)
    try:
        write_failure_json(path, dataclasses.asdict(record))
    except OSError as e:  # reporting must not hide the error being reported
        _not_recorded(path, e)


def read_no_restart(result_path: str) -> List[NoRestart]:
    """What the workers of the last run recorded, lowest rank first."""
    records = []
    for path in sorted(glob.glob(glob.escape(result_path) + ".no-restart.rank*.json")):
        try:
            with open(path) as f:
                data = json.load(f)
            kind = FailureKind(data["kind"])
            records.append(NoRestart(rank=int(data["rank"]), kind=kind, error=str(data["error"])))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(records, key=lambda r: r.rank)


def remove_no_restart(result_path: str) -> None:
    remove_failures(glob.glob(glob.escape(result_path) + ".no-restart.rank*.json*"))


# --- where a run failed (a failure that recurs there is not retried) -----------------------


@dataclasses.dataclass(frozen=True)
class FailurePoint:
    """Where a run of a trial failed: rank ``rank`` with ``error`` (``Type: first line``, or
    ``StallError`` for a stall) after ``batch`` batches, at ``place`` (the innermost frame of the
    error, or the hook a stalled rank entered last)."""

    rank: int
    error: str
    batch: Optional[int] = None
    place: Optional[str] = None

    def recurs(self, previous: Optional["FailurePoint"]) -> bool:
        """Whether this failure repeats ``previous``: the same rank at the same batch, with the
        same error or at the same place. det-lite replays a run exactly (data order, RNG
        streams, weights from the checkpoint), so such a failure would recur on every restart."""
        if previous is None or (self.rank, self.batch) != (previous.rank, previous.batch):
            return False
        return self.error == previous.error or (self.place is not None and self.place == previous.place)

    def describe(self) -> str:
        at = f" after {self.batch} batches" if self.batch is not None else ""
        where = f" ({self.place})" if self.place else ""
        return f"rank {self.rank}: {self.error}{at}{where}"

    def repeat_reason(self) -> str:
        """Why a run that failed here again is not restarted (the runner's note)."""
        again = "stalled again" if self.error.startswith("StallError") else "failed again"
        return (
            f"it {again} the same way ({self.describe()}); det-lite replays a run exactly, "
            "so a restart would fail alike"
        )


def repeat_reason(point: Optional[FailurePoint], previous: Optional[FailurePoint]) -> Optional[str]:
    """Why a run that failed at ``point`` is not restarted when the run before failed at
    ``previous`` the same way; None when it may be restarted."""
    return point.repeat_reason() if point is not None and point.recurs(previous) else None


def failure_point_file(result_path: str, rank: int) -> str:
    return f"{result_path}.failed-at.rank{rank}.json"


def record_failure_point(result_path: str, writer: int, point: FailurePoint) -> None:
    """In worker ``writer``: say where the trial failed (beside its result)."""
    path = failure_point_file(result_path, writer)
    try:
        write_failure_json(path, dataclasses.asdict(point))
    except OSError as e:  # reporting must not hide the error being reported
        logger.warning("could not record where this worker failed in %s: %s", path, e)


def read_failure_point(result_path: str) -> Optional[FailurePoint]:
    """Where the last run failed, as its lowest-ranked writer recorded it (None: unknown)."""
    for path in sorted(glob.glob(glob.escape(result_path) + ".failed-at.rank*.json")):
        try:
            with open(path) as f:
                data = json.load(f)
            batch, place = data.get("batch"), data.get("place")
            return FailurePoint(
                rank=int(data["rank"]),
                error=str(data["error"]),
                batch=None if batch is None else int(batch),
                place=None if place is None else str(place),
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return None


def remove_failure_points(result_path: str) -> None:
    remove_failures(glob.glob(glob.escape(result_path) + ".failed-at.rank*.json*"))
