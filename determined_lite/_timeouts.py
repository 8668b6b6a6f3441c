"""How long distributed work may wait, read from the environment (standard library only, so
that launchers and the runner need not import torch to know them), and the one reader of a
number of seconds given in an environment variable."""

from __future__ import annotations

import math
import os
from typing import Mapping, Optional


def env_seconds(name: str, default: float, env: Optional[Mapping[str, str]] = None) -> float:
    """``$name`` of ``env`` (default ``os.environ``) as a number of seconds >= 0 (``default``
    when unset or empty); a ValueError naming the variable for anything else."""
    text = str((os.environ if env is None else env).get(name, "")).strip()
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
STALL_TIMEOUT_ENV = "DET_LITE_STALL_TIMEOUT"
SETUP_TIMEOUT_ENV = "DET_LITE_SETUP_TIMEOUT"
ACTIVATE_WAIT_ENV = "DET_LITE_ACTIVATE_WAIT"
FORKSERVER_IDLE_ENV = "DET_LITE_FORKSERVER_IDLE_S"  # a fork server's life without runners
# Every variable read as seconds: `experiment create` and `activate` check them all (and a
# config's environment_variables) before recording anything, so a bad value is one line there
# instead of a worker's traceback.
SECONDS_ENV = (
    DIST_TIMEOUT_ENV,
    COLLECTIVE_TIMEOUT_ENV,
    STALL_TIMEOUT_ENV,
    SETUP_TIMEOUT_ENV,
    ACTIVATE_WAIT_ENV,
    FORKSERVER_IDLE_ENV,
)

# Seconds one collective may wait (torch's own default; the stall watchdog speaks first).
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0
DEFAULT_DIST_TIMEOUT_S = 30.0


def dist_timeout() -> float:
    """Seconds a worker may wait to join the group: ``$DET_LITE_DIST_TIMEOUT`` (default 30;
    collectives: ``$DET_LITE_COLLECTIVE_TIMEOUT``)."""
    return env_seconds(DIST_TIMEOUT_ENV, DEFAULT_DIST_TIMEOUT_S)


def collective_timeout() -> float:
    """Seconds one collective may wait: ``$DET_LITE_COLLECTIVE_TIMEOUT`` (default 1800)."""
    return env_seconds(COLLECTIVE_TIMEOUT_ENV, DEFAULT_COLLECTIVE_TIMEOUT_S)


def seconds_env_problem(env: Mapping[str, str], where: str = "shell environment") -> Optional[str]:
    """The first variable of ``SECONDS_ENV`` in ``env`` that is not a number of seconds >= 0, as
    one line naming ``where`` it was set (None when all are valid)."""
    for name in SECONDS_ENV:
        try:
            env_seconds(name, 0.0, env)
        except ValueError as e:
            return f"{where}: {e}"
    return None
