"""Printing and following log lines from the store (``experiment logs``, ``trial logs``)."""

from __future__ import annotations

import datetime
import time
from typing import Any, Callable, Dict, List

import click

POLL_SECONDS = 0.5
PAGE = 5000


def format_line(entry: Dict[str, Any], with_trial: bool, timestamps: bool) -> str:
    """``[trial 3] [rank 1] text``; experiment-level lines ``[experiment 2] text``."""
    prefix = []
    if timestamps:
        stamp = datetime.datetime.fromtimestamp(entry["time"], tz=datetime.timezone.utc)
        prefix.append(f"[{stamp.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}]")
    if with_trial:
        if entry["trial_id"] is None:
            prefix.append(f"[experiment {entry['experiment_id']}]")
        else:
            prefix.append(f"[trial {entry['trial_id']}]")
    if entry["rank"] is not None:
        prefix.append(f"[rank {entry['rank']}]")
    return " ".join(prefix + [entry["line"]]) if prefix else entry["line"]


def print_logs(
    fetch: Callable[..., List[Dict[str, Any]]],
    tail: int | None,
    follow: bool,
    finished: Callable[[], bool],
    with_trial: bool,
    timestamps: bool,
) -> None:
    """Print the lines ``fetch(after_id=, tail=, limit=)`` returns; with ``follow``, keep polling
    until ``finished()`` is true and every line written before that has been printed."""
    last = 0
    entries = fetch(after_id=0, tail=tail, limit=None)
    try:
        while True:
            for entry in entries:
                click.echo(format_line(entry, with_trial, timestamps))
            if entries:
                last = entries[-1]["id"]
            if not follow:
                return
            done = finished()  # checked before fetching, so lines written before the end are printed
            entries = fetch(after_id=last, tail=None, limit=PAGE)
            if not entries:
                if done:
                    return
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        return
