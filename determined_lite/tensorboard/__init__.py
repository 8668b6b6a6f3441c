"""Where a trial's TensorBoard event files go, and writers for them.

The active trial (set by ``determined_lite.pytorch.init``) owns one directory,
``$DET_LITE_HOME/tensorboard/experiment_<id>/trial_<id>/`` (or ``tensorboard/local/<run>/`` for
a trial run from plain Python without an experiment); the harness and ``TorchWriter`` both
write there.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Iterator, Optional

from determined_lite.store._paths import det_lite_home

_active_path: Optional[str] = None


def trial_tensorboard_path(experiment_id: Optional[int], trial_id: Optional[int]) -> str:
    """The TensorBoard directory of a trial (a fresh local one when it has no ids)."""
    root = os.path.join(det_lite_home(), "tensorboard")
    if experiment_id is not None and trial_id is not None:
        return os.path.join(root, f"experiment_{experiment_id}", f"trial_{trial_id}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, "local", f"run_{stamp}_{uuid.uuid4().hex[:8]}")


def get_base_path() -> str:
    """The active trial's TensorBoard directory."""
    global _active_path
    if _active_path is None:
        _active_path = trial_tensorboard_path(None, None)
    return _active_path


def set_active_path(path: Optional[str]) -> None:
    """Make ``path`` the active trial's directory (None: none is active)."""
    global _active_path
    _active_path = path


@contextlib.contextmanager
def active_path(path: Optional[str]) -> Iterator[None]:
    """``path`` is the active trial's directory inside the block (``pytorch.init()``'s), the
    enclosing one's again after it."""
    enclosing = _active_path
    set_active_path(path)
    try:
        yield
    finally:
        set_active_path(enclosing)


__all__ = ["active_path", "det_lite_home", "get_base_path", "set_active_path", "trial_tensorboard_path"]
