"""Whether a distributed engine can start a trial's workers on this machine, asked before anything
is recorded (``experiment create`` exits 2 with the reason) and again by the engine's launcher."""

from __future__ import annotations

import importlib.util
from typing import Optional

HOROVOD_MISSING = (
    "resources.distributed_backend is 'horovod' but Horovod is not installed; install it "
    "with scripts/install-horovod.sh or set resources.distributed_backend: torch"
)


def horovod_installed() -> bool:
    """Whether Horovod can be imported, looked up without importing it (that costs ~1 s)."""
    return importlib.util.find_spec("horovod") is not None


def engine_problem(backend: str, slots: int) -> Optional[str]:
    """Why ``slots`` workers of ``backend`` cannot start here, or None when they can.

    One slot runs in a plain process whatever the backend, so only multi-slot runs need the
    engine.
    """
    if slots > 1 and backend == "horovod" and not horovod_installed():
        return HOROVOD_MISSING
    return None
