"""What a Core API call tells the worker: the script is alive, and what it did last.

Every call that shows progress (reports, checkpoints, ``should_preempt``, the searcher's
operations) is noted on the worker's trial, whose stall watchdog counts it as progress and
names the last one when the script stops making any (``launch/_watchdog.py``). Outside
det-lite's trials (local mode) there is no trial and nothing to note.
"""

from __future__ import annotations

from typing import Any


def note_call(trial: Any, call: str, every_rank: bool = False) -> None:
    """Note on ``trial`` (None: local mode) that the script made the Core API call ``call``, e.g.
    ``core_context.train.report_training_metrics(steps_completed=3)``. ``every_rank``: a collective every rank
    makes in the same order (the watchdog counts those to find the rank that is behind)."""
    if trial is not None:
        trial.note_call(call, every_rank)
