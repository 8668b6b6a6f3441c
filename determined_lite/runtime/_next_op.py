"""A running trial's next operation: its chief asks the runner at the end of one (issue 27).

When the spec says ``ask_next_op``, the chief that reached its run's length (validated,
checkpoint registered) writes ``<result>.ask.json`` (``{"length", "metric"}``) and wakes the
runner; the runner claims it by renaming it to ``<result>.ask.taken`` (a rename succeeds once)
and writes ``<result>.answer.json``: ``{"length": n, "ask": bool}`` (train on to ``n``) or
``{"length": null}`` (end the run as before). An unclaimed question is withdrawn (unlinked)
after :func:`claim_wait` seconds; a claimed one is answered within ``ANSWER_WAIT_S``. Under Ray
the chief asks over its report pipe and the driver asks with these files. The contract:
docs/design.md, "Promotions in the process".
"""

from __future__ import annotations

import json
import os
import stat
import time
from typing import Any, Callable, Dict, Optional

from determined_lite._progress import write_json_atomic
from determined_lite.runtime._spec import WorkerSpec

NEXT_OP_ENV = "DET_LITE_NEXT_OP"  # 0: runs never ask (every promotion starts a new process)
CLAIM_WAIT_ENV = "DET_LITE_NEXT_OP_WAIT"
DEFAULT_CLAIM_WAIT_S = 2.0  # announced, it is taken at once (polled: 0.02 s); seconds under load
ANSWER_WAIT_S = 60.0  # a claimed question is answered in the same call of the runner
POLL_S = 0.002
Asker = Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]


def question_path(result_path: str) -> str:
    return result_path + ".ask.json"


def answer_path(result_path: str) -> str:
    return result_path + ".answer.json"


def _taken_path(result_path: str) -> str:
    return result_path + ".ask.taken"


def enabled(env: Dict[str, str]) -> bool:
    """Whether runs may ask for their next operation (``DET_LITE_NEXT_OP=0`` says no; ``env``:
    the trials' environment, which wins over this process's)."""
    return env.get(NEXT_OP_ENV, os.environ.get(NEXT_OP_ENV, "1")).strip() not in ("0", "false", "no")


def claim_wait() -> float:
    """Seconds a chief waits for the runner to take its question (``$DET_LITE_NEXT_OP_WAIT``)."""
    value = os.environ.get(CLAIM_WAIT_ENV, "").strip()
    try:
        return max(0.0, float(value)) if value else DEFAULT_CLAIM_WAIT_S
    except ValueError:
        return DEFAULT_CLAIM_WAIT_S


def remove_next_op_files(result_path: str) -> None:
    """What an earlier run of the trial left (the runner, before it starts a run)."""
    for path in (question_path(result_path), answer_path(result_path), _taken_path(result_path)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# --- the chief's side -------------------------------------------------------------------------


def ask_next_length(spec: WorkerSpec, metric: Optional[float], ask: Optional[Asker] = None) -> Optional[int]:
    """The length (searcher units) this run trains on to in this process, None to end it; on a
    new length ``spec`` is updated (``max_length``, ``ask_next_op``), so the trial reads it.
    ``ask``: how to reach a runner on another machine (the Ray executor's driver, which asks
    with :func:`ask_runner`), else the run directory's files."""
    if not spec.ask_next_op or metric is None or not isinstance(metric, (int, float)):
        return None
    unit, length = next(iter(spec.max_length.items()))
    question = {"length": length, "metric": float(metric)}
    answer = ask(question) if ask is not None else ask_runner(spec.result_path, question, spec.wake_path)
    spec.ask_next_op = False
    if answer is None or answer.get("length") is None:
        return None
    new = int(answer["length"])
    spec.max_length = {unit: new}
    spec.ask_next_op = bool(answer.get("ask"))
    return new


def ask_runner(
    result_path: str, question: Dict[str, Any], wake_path: Optional[str]
) -> Optional[Dict[str, Any]]:
    """Ask the runner through the run directory beside ``result_path`` (see the module's docstring)."""
    answer = answer_path(result_path)
    if os.path.exists(answer):
        os.unlink(answer)
    write_json_atomic(question_path(result_path), question)
    wait = claim_wait()
    if wake_path and wait > 0:  # (a chief that waits 0 s withdraws its question at once)
        _announce(wake_path)
    deadline = time.monotonic() + wait
    while not os.path.exists(answer):
        if time.monotonic() >= deadline:
            try:
                os.unlink(question_path(result_path))
                return None  # withdrawn before the runner saw it: the run ends as before
            except FileNotFoundError:  # the runner took it just now: its answer follows
                deadline = time.monotonic() + ANSWER_WAIT_S
                if not _wait_for(answer, deadline):
                    raise RuntimeError(
                        f"the runner took this trial's question ({question_path(result_path)}) "
                        f"but wrote no answer in {ANSWER_WAIT_S:.0f} s"
                    ) from None
                break
        time.sleep(POLL_S)
    with open(answer) as f:
        text = f.read()
    os.unlink(answer)
    return dict(json.loads(text))


def _announce(wake_path: str) -> None:
    """A byte to the runner's FIFO: its loop wakes and takes the question now. Nothing when no
    runner reads it (then the claim wait ends the run as before) or the path is not a FIFO."""
    try:
        fd = os.open(wake_path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader; ENOENT: the runner is gone
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"\0")
    except BlockingIOError:  # full: a wake-up is pending already
        pass
    finally:
        os.close(fd)


def _wait_for(path: str, deadline: float) -> bool:
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


# --- the runner's side ------------------------------------------------------------------------


def take_question(result_path: str) -> Optional[Dict[str, Any]]:
    """The chief's question, claimed (None when it asked nothing or withdrew it); the caller
    must then :func:`answer` it."""
    taken = _taken_path(result_path)
    try:
        os.rename(question_path(result_path), taken)
    except FileNotFoundError:
        return None
    with open(taken) as f:
        question = dict(json.load(f))
    os.unlink(taken)
    metric = question.get("metric")
    if not isinstance(metric, (int, float)) or isinstance(metric, bool):
        question["metric"] = None
    return question


def answer(result_path: str, length: Optional[int], ask: bool = False) -> None:
    """Answer a claimed question: train on to ``length`` (asking again there when ``ask``), or
    end the run (None)."""
    write_json_atomic(answer_path(result_path), {"length": length, "ask": bool(ask and length is not None)})
