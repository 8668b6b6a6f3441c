"""The embedded experiment store: one SQLite file (WAL) shared by the CLI, the runner and workers.

Experiment and trial states (Determined's, the subset det-lite needs; ``ExperimentState``,
``TrialState``):

* ``ACTIVE``: running, or about to; ``PAUSED``: stopped at a checkpoint, resumable with
  ``experiment activate``;
* ``COMPLETED``, ``CANCELED`` (killed), ``ERROR``: terminal (``TERMINAL_STATES``), stamped with
  ``ended_at``.

``Store`` is one ``Database`` and its repositories (``store.experiments``, ``trials``,
``metrics``, ``checkpoints``, ``models``, ``requests``, ``logs``; ``_store.py``).

Pause and kill from another terminal are requests (``Action``; ``store.requests.request`` /
``apply``) that the experiment's processes read at their next scheduling-unit boundary.
Importing this package imports only the standard library.
"""

from determined_lite.store._db import NotFoundError, StoreError, StoreFullError, json_safe, schema_version
from determined_lite.store._paths import (
    context_snapshot_dir,
    default_checkpoint_root,
    default_db_path,
    det_lite_home,
    process_alive,
    tensorboard_dir,
)
from determined_lite.store._states import (
    STOPPED_EARLY,
    TERMINAL_STATES,
    Action,
    ActionOutcome,
    ExperimentKind,
    ExperimentState,
    TrialState,
    experiment_display_state,
    trial_display_state,
)
from determined_lite.store._store import Store
from determined_lite.store._workloads import Workload

__all__ = [
    "STOPPED_EARLY",
    "TERMINAL_STATES",
    "Action",
    "ActionOutcome",
    "ExperimentKind",
    "ExperimentState",
    "NotFoundError",
    "Store",
    "StoreError",
    "StoreFullError",
    "TrialState",
    "Workload",
    "context_snapshot_dir",
    "default_checkpoint_root",
    "default_db_path",
    "det_lite_home",
    "json_safe",
    "process_alive",
    "schema_version",
    "tensorboard_dir",
    "experiment_display_state",
    "trial_display_state",
]
