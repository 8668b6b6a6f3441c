"""How long distributed work may wait, read once from the environment (standard library only,
so that launchers and the runner need not import torch to know them)."""

from __future__ import annotations

import os

DIST_TIMEOUT_ENV = "DET_LITE_DIST_TIMEOUT"
COLLECTIVE_TIMEOUT_ENV = "DET_LITE_COLLECTIVE_TIMEOUT"

# Seconds a worker may wait to join the group (collectives: $DET_LITE_COLLECTIVE_TIMEOUT).
DEFAULT_TIMEOUT_S = float(os.environ.get(DIST_TIMEOUT_ENV, "30"))
# Seconds one collective may wait (torch's own default; the stall watchdog speaks first).
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0
