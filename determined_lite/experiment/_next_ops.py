"""The runner's side of a running trial's question "what next?" (``runtime/_next_op.py``).

A run whose spec says ``ask_next_op`` asks, at the end of its length, with its searcher metric
there. The runner gives that metric to the searcher at once (what it did when the run exited)
and answers with the length the searcher asked of the trial in the same event, when it did (an
ASHA promotion decided at once): the run trains on in its process, as Determined's trials go
through ``searcher.operations()``. Otherwise (not promoted now, closed, or the experiment is
pausing) the run ends as before; a later promotion resumes it from its checkpoint. The run is
then marked ``reported``: its exit gives the searcher nothing more (``Runs.handle_exit``).
"""

from __future__ import annotations

from typing import Any, Optional

from determined_lite.experiment._runs import Run, Runs
from determined_lite.experiment._search import Search
from determined_lite.experiment._wakeup import Wakeup
from determined_lite.runtime._next_op import answer, take_question

# How often the loop looks for questions while a run may ask that cannot announce its question
# (its chief is on another machine: a Ray node's; on this machine it wakes the loop's FIFO).
QUESTION_POLL_S = 0.02


def wait_s(runs: Runs, wakeup: Wakeup, idle_s: float) -> float:
    """How long the runner's loop may wait for an event: ``idle_s``, or ``QUESTION_POLL_S``
    while one of its runs may ask "what next?" without waking it (through ``wakeup``)."""
    polled = any(
        r.spec.ask_next_op and not r.reported and not (r.spec.wake_path and wakeup.listening) for r in runs
    )
    return min(idle_s, QUESTION_POLL_S) if polled else idle_s


def answer_next_ops(runs: Runs, search: Search) -> None:
    """Answer the questions of the running trials."""
    for run in runs:
        if not run.spec.ask_next_op or run.reported:
            continue
        question = take_question(run.spec.result_path)
        if question is None:
            continue
        length = _next_length(runs, search, run, question)
        ask = length is not None and runs.launcher.asks_next_op(length)
        answer(run.spec.result_path, length, ask)
        run.spec.ask_next_op = ask


def _next_length(runs: Runs, search: Search, run: Run, question: Any) -> Optional[int]:
    """The searcher's next length for ``run``'s trial if it trains on in its process, else None."""
    request, metric = run.request, question["metric"]
    if metric is None or question.get("length") != run.length:
        return None  # its exit says what went wrong, as before
    request.trained, request.pending = run.length, None
    run.reported = True
    search.report(request, float(metric), run.length)
    if search.pausing or request.closed or request.pending is None:
        return None
    run.length, run.reported = request.pending, False  # (the run is not in the state apply saved)
    trial_id, goal = request.trial_id, runs.launcher.goal(run.length)
    runs.logs.log(trial_id, f"trial {trial_id} promoted at {request.trained}: {goal} in its process")
    return int(run.length)
