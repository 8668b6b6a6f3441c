"""Time budgets for tests that run real work (subprocesses, trainings, a pseudo-terminal).

A budget is what the work needs on a quiet machine, stretched by how loaded the machine is: a
shared 2-core box at a load of 5-14 runs a subprocess several times slower, and a fixed limit
would fail there although nothing is wrong. Standard library only.
"""

from __future__ import annotations

import os

SCALE_ENV = "DET_LITE_TEST_TIME_SCALE"  # a fixed factor instead of the measured one
MAX_FACTOR = 8.0


def load_factor() -> float:
    """How many times longer work takes now than on a quiet machine: the busiest recent load
    average per core (1, 5, 15 minutes), between 1 and ``MAX_FACTOR``; ``$DET_LITE_TEST_TIME_SCALE``
    overrides it."""
    fixed = os.environ.get(SCALE_ENV)
    if fixed:
        return max(1.0, float(fixed))
    try:
        load = max(os.getloadavg())
    except OSError:  # no load average on this platform
        return 1.0
    return min(MAX_FACTOR, max(1.0, load / (os.cpu_count() or 1)))


def budget(seconds: float) -> float:
    """``seconds`` (enough on a quiet machine) stretched by the load now."""
    return seconds * load_factor()
