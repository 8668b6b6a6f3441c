"""How long distributed work may wait, read from the environment (standard library only, so
that launchers and the runner need not import torch to know them), and the one reader of a
number of seconds given in an environment variable."""

from __future__ import annotations

import math
import os


def env_seconds(name: str, default: float) -> float:
    """``$name`` as a number of seconds >= 0 (``default`` when unset or empty); a ValueError
    naming the variable for anything else."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"${name} must be a number of seconds >= 0, got {text!r}")
    return value


DIST_TIMEOUT_ENV = "DET_LITE_DIST_TIMEOUT"
COLLECTIVE_TIMEOUT_ENV = "DET_LITE_COLLECTIVE_TIMEOUT"

# Seconds a worker may wait to join the group (collectives: $DET_LITE_COLLECTIVE_TIMEOUT).
DEFAULT_TIMEOUT_S = env_seconds(DIST_TIMEOUT_ENV, 30.0)
# Seconds one collective may wait (torch's own default; the stall watchdog speaks first).
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0
