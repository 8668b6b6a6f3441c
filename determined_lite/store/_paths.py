"""Where det-lite keeps its state, and whether a recorded process is still the one that is running."""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional

DB_FILE = "det-lite.db"
EXPERIMENTS_DIR = "experiments"
CONTEXT_SNAPSHOT = "context"


def det_lite_home() -> str:
    """The storage root: ``$DET_LITE_HOME``, default ``~/.det-lite`` (absolute, user-expanded)."""
    root = os.environ.get("DET_LITE_HOME") or os.path.join("~", ".det-lite")
    return os.path.abspath(os.path.expanduser(root))


def default_db_path() -> str:
    """``<home>/det-lite.db``."""
    return os.path.join(det_lite_home(), DB_FILE)


def default_checkpoint_root(home: Optional[str] = None) -> str:
    """``<home>/checkpoints`` (used unless ``checkpoint_storage.host_path`` says otherwise)."""
    return os.path.join(home or det_lite_home(), "checkpoints")


def checkpoint_root(exp_conf: Mapping[str, Any]) -> str:
    """Where an experiment's checkpoints go.

    ``checkpoint_storage.host_path[/storage_path]``, else ``<home>/checkpoints``.
    """
    storage = exp_conf.get("checkpoint_storage") or {}
    host_path = storage.get("host_path")
    if not host_path:
        return default_checkpoint_root()
    storage_path = storage.get("storage_path")
    return os.path.join(host_path, storage_path) if storage_path else host_path


def tensorboard_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/tensorboard/experiment_<id>``: the experiment's TensorBoard logdir."""
    return os.path.join(home or det_lite_home(), "tensorboard", f"experiment_{int(experiment_id)}")


def experiment_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/experiments/<id>``: the experiment's run directory (specs, results, runner.log,
    the context snapshot)."""
    return os.path.join(home or det_lite_home(), EXPERIMENTS_DIR, str(int(experiment_id)))


def context_snapshot_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/experiments/<id>/context``: the context directory as ``experiment create`` saw it."""
    return os.path.join(experiment_dir(experiment_id, home), CONTEXT_SNAPSHOT)


def process_token(pid: int) -> Optional[str]:
    """An id for the process ``pid`` that a later process with the same pid will not share.

    On Linux this is the process start time from ``/proc/<pid>/stat`` (field 22); elsewhere
    ``None`` (then only the pid is compared).
    """
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _stat_fields(pid: int) -> Optional[List[str]]:
    """``/proc/<pid>/stat`` from field 3 (the state) on; None when it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    return stat[stat.rfind(")") + 2 :].split()


def process_alive(pid: Optional[int], token: Optional[str] = None) -> bool:
    """Whether ``pid`` runs and is not a zombie; with ``token``, also that it is the same process."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return False
    fields = _stat_fields(pid)
    if fields and fields[0] in ("Z", "X"):  # zombie, dead
        return False
    if token is not None:
        current = process_token(pid)
        if current is not None and current != token:
            return False
    return True
