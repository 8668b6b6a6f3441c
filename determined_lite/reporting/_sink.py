"""Where a chief's reports go when the store is on another machine (``resources.executor: ray``).

Only the driver writes the store: SQLite is never opened from another node. A chief started by
the Ray executor finds ``$DET_LITE_REPORT_FD`` (a pipe to its slot's actor) and reports through a
:class:`RemoteReporter`: each call of the :class:`TrialReporter` interface becomes one JSON line
on that pipe, in call order; the driver takes the lines through Ray and replays them, in the same
order, on its own ``TrialReporter`` (:func:`apply_record`). A checkpoint line is written only
once the checkpoint is flushed (the loop's ``on_checkpoint_upload_end``), so the driver never
registers one that is not complete. What a worker reads from the store is a question on the same
pipe (``experiment_best_validation``): the driver answers it from its store after replaying every
line before it, on a second pipe (``$DET_LITE_ANSWER_FD``), so the answer counts the chief's own
reports as a local read would. The pause/kill poll of every rank reads ``$DET_LITE_STOP_FILE``, a
file on its node that the driver has each actor create when it sees a request in the store.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, Optional

REPORT_FD_ENV = "DET_LITE_REPORT_FD"
STOP_FILE_ENV = "DET_LITE_STOP_FILE"
ANSWER_FD_ENV = "DET_LITE_ANSWER_FD"
CALLS = (
    "restart_at", "own_length", "training", "validation", "checkpoint", "uploaded_checkpoint",
    "forget_checkpoint",
)
QUESTIONS = ("experiment_best_validation",)
NEXT_OP = "next_op"  # the chief's next-op question: the driver asks its runner (_next_op.py)
_REMOTE: Optional["RemoteReporter"] = None


def _plain(value: Any) -> Any:
    """numpy values (what callbacks get) as JSON values, as the store writes them."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not a JSON value: {type(value).__name__}")


class RemoteReporter:
    """A chief's ``TrialReporter`` calls as JSON lines on a pipe (see the module's docstring)."""

    store = None  # no store on this node

    def __init__(
        self, fd: int, stop_file: Optional[str], answer_fd: Optional[int] = None, storage: Any = None
    ) -> None:
        self._storage = storage  # a cloud checkpoint storage: the chief uploads, from its node
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._stop_file = stop_file
        self._answers = None if answer_fd is None else os.fdopen(answer_fd, "r", encoding="utf-8")
        self._lock = threading.Lock()  # the background checkpoint flush reports from its thread
        self._ask_lock = threading.Lock()  # one question at a time: answers come back in order

    def _send(self, call: str, *args: Any) -> None:
        line = json.dumps({"call": call, "args": list(args)}, default=_plain, allow_nan=True)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def restart_at(self, batches: int) -> None:
        self._send("restart_at", batches)

    def own_length(self, batches: int) -> None:
        self._send("own_length", batches)

    def training(self, batches: int, metrics: Dict[str, Any]) -> None:
        self._send("training", batches, metrics)

    def validation(self, batches: int, metrics: Dict[str, Any]) -> None:
        self._send("validation", batches, metrics)

    def checkpoint(
        self, uuid: str, checkpoint_dir: str, total_batches: int, metrics: Optional[Dict[str, Any]]
    ) -> None:
        if self._storage is None:  # a shared file system: the driver sees the directory
            self._send("checkpoint", uuid, checkpoint_dir, total_batches, metrics)
            return
        self._storage.upload(checkpoint_dir, uuid)
        self._send("uploaded_checkpoint", uuid, total_batches, metrics)

    def forget_checkpoint(self, uuid: str) -> None:
        self._send("forget_checkpoint", uuid)

    def experiment_best_validation(self) -> Optional[float]:
        """The driver's answer from its store (see the module's docstring)."""
        answer = self._ask("experiment_best_validation")
        return None if answer is None else float(answer)

    def ask_next_op(self, question: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The runner's answer to the chief's next-op question, asked by the driver."""
        answer = self._ask(NEXT_OP, question)
        return None if answer is None else dict(answer)

    def _ask(self, question: str, *args: Any) -> Any:
        if self._answers is None:
            raise RuntimeError(f"{question}: this worker has no answer pipe from the driver")
        with self._ask_lock:
            self._send(question, *args)
            line = self._answers.readline()
        if not line:
            raise RuntimeError(f"{question}: the driver closed the answer pipe without answering")
        return json.loads(line)["answer"]

    def stop_requested(self) -> bool:
        return bool(self._stop_file) and os.path.exists(str(self._stop_file))


def remote_reporter(storage: Any = None) -> Optional[RemoteReporter]:
    """The chief's remote reporter when its executor gave it a pipe (else None: the store); one
    per process (the pipe is opened once). ``storage``: a cloud storage the chief uploads to."""
    global _REMOTE
    fd = os.environ.get(REPORT_FD_ENV)
    if not fd:
        return None
    if _REMOTE is None:
        answer_fd = os.environ.get(ANSWER_FD_ENV)
        answers = int(answer_fd) if answer_fd else None
        _REMOTE = RemoteReporter(int(fd), os.environ.get(STOP_FILE_ENV), answers, storage)
    return _REMOTE


def remote_next_op() -> Optional[Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]]:
    """How the chief asks its next operation when its runner is on another machine (None: the
    run directory is the runner's, ask there)."""
    remote = remote_reporter() if os.environ.get(REPORT_FD_ENV) else None
    return None if remote is None else remote.ask_next_op


def remote_stop_requested() -> Optional[bool]:
    """Any rank's pause/kill poll under a remote executor: whether the driver raised this node's
    stop flag (None when the executor gave no flag: the store is on this machine, ask it)."""
    stop_file = os.environ.get(STOP_FILE_ENV)
    if not stop_file:
        return None
    return os.path.exists(stop_file)


def apply_record(
    reporter: Any, line: str, next_op: Optional[Callable[[Dict[str, Any]], Any]] = None
) -> Optional[str]:
    """Replay one :class:`RemoteReporter` line on the driver's ``TrialReporter``; a question's
    answer, from the driver's store (``next_op``: the driver's asker of its runner), as the line
    to send back (None for a report)."""
    record = json.loads(line)
    call = record.get("call")
    if call == NEXT_OP:
        answer = next_op(dict(record["args"][0])) if next_op is not None else None
        return json.dumps({"answer": answer})
    if call in QUESTIONS:
        return json.dumps({"answer": getattr(reporter, call)()}, allow_nan=True)
    if call not in CALLS:
        raise ValueError(f"unknown report from a worker: {call!r}")
    getattr(reporter, call)(*record["args"])
    return None
