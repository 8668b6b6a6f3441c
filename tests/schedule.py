"""How pytest-xdist shares the suite between its workers (``-n 3``, pyproject's ``--dist
loadgroup``): every test is in an ``xdist_group`` (its module's unless it names one), a group runs
whole on one worker, and the groups are handed out longest first, by what each took when last
recorded (``tests/group_seconds.json``): a long group handed out last would leave the other worker
idle while it runs. A slow-tier group not recorded yet counts as ``UNKNOWN_SLOW_S``, a fast one as
nothing. ``DET_LITE_RECORD_GROUP_SECONDS=1`` makes the session (the controller under xdist) write
what each group took in this run into that file at its end, keeping the groups it did not run.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
from typing import Callable, Dict, List

import pytest

SECONDS_FILE = pathlib.Path(__file__).with_name("group_seconds.json")
RECORD_ENV = "DET_LITE_RECORD_GROUP_SECONDS"
UNKNOWN_SLOW_S = 60.0


def group(item: pytest.Item) -> str:
    """The item's ``xdist_group`` (its module's path when it names none)."""
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else item.nodeid.split("::")[0]


def assign_groups(items: List[pytest.Item]) -> None:
    """Put every item that names no group in its module's: a module's tests, and its
    module-scoped fixtures, stay on one worker."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group(item)))


def longest_first(items: List[pytest.Item], is_slow: Callable[[pytest.Item], bool]) -> None:
    """Sort ``items`` by their group's expected seconds, longest first (a stable sort: the tests
    of a group keep their order)."""
    recorded = load()
    expected: Dict[str, float] = {}
    for item in items:
        name = group(item)
        guess = UNKNOWN_SLOW_S if is_slow(item) else 0.0
        expected[name] = max(expected.get(name, 0.0), recorded.get(name, guess))
    items.sort(key=lambda item: (-expected[group(item)], group(item)))


def load() -> Dict[str, float]:
    try:
        data = json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


class Recorder:
    """What each group took in this session (setup, call and teardown of its tests), written to
    ``SECONDS_FILE`` at the end when ``$DET_LITE_RECORD_GROUP_SECONDS`` is set; xdist's workers
    leave it to their controller, which gets every report."""

    def __init__(self) -> None:
        self.on = bool(os.environ.get(RECORD_ENV)) and not os.environ.get("PYTEST_XDIST_WORKER")
        self.seconds: Dict[str, float] = collections.defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        if self.on:
            nodeid = report.nodeid  # xdist's: "<module>::<test>@<group>"
            at = nodeid.rfind("@")
            name = nodeid[at + 1 :] if at > nodeid.rfind("]") else nodeid.split("::")[0]
            self.seconds[name] += report.duration

    def save(self) -> None:
        if self.on and self.seconds:
            merged = load()
            merged.update({name: round(s, 1) for name, s in self.seconds.items()})
            SECONDS_FILE.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
