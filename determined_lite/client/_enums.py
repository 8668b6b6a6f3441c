"""Determined's SDK enums, with Determined's member names and values (``"STATE_COMPLETED"``,
``"SORT_BY_BATCH_NUMBER"``, ``"ORDER_BY_ASC"``), so code that compares or prints them behaves
the same. The sort keys are the ones the local store can order by."""

from __future__ import annotations

import enum


class ExperimentState(enum.Enum):
    """An experiment's state. det-lite's store only ever gives ACTIVE, PAUSED, COMPLETED,
    CANCELED and ERROR; the others are Determined's cluster states, kept for comparisons."""

    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    DELETING = "STATE_DELETING"
    DELETE_FAILED = "STATE_DELETE_FAILED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"


# What ``Experiment.wait()`` returns on (Determined's set).
TERMINAL_STATES = frozenset(
    {ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.DELETED, ExperimentState.ERROR}
)


class TrialState(enum.Enum):
    """A trial's state (same remark as ``ExperimentState``)."""

    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    CANCELED = "STATE_CANCELED"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"


class CheckpointState(enum.Enum):
    """A checkpoint's state; the store lists COMPLETED checkpoints only."""

    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    PARTIALLY_DELETED = "STATE_PARTIALLY_DELETED"


class CheckpointSortBy(enum.Enum):
    """Checkpoint attributes to sort by (a ``str`` sorts by that validation metric)."""

    UUID = "SORT_BY_UUID"
    TRIAL_ID = "SORT_BY_TRIAL_ID"
    BATCH_NUMBER = "SORT_BY_BATCH_NUMBER"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


class OrderBy(enum.Enum):
    """Ascending or descending (``ASC`` and ``DESC`` are aliases, as in Determined)."""

    ASCENDING = "ORDER_BY_ASC"
    ASC = "ORDER_BY_ASC"
    DESCENDING = "ORDER_BY_DESC"
    DESC = "ORDER_BY_DESC"


class TrialSortBy(enum.Enum):
    """Trial fields ``Experiment.list_trials`` sorts by."""

    ID = "SORT_BY_ID"
    START_TIME = "SORT_BY_START_TIME"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    BEST_VALIDATION_METRIC = "SORT_BY_BEST_VALIDATION_METRIC"
    BATCHES_PROCESSED = "SORT_BY_BATCHES_PROCESSED"
    RESTARTS = "SORT_BY_RESTARTS"


class ExperimentSortBy(enum.Enum):
    """Experiment fields ``list_experiments`` sorts by."""

    ID = "SORT_BY_ID"
    START_TIME = "SORT_BY_START_TIME"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    NUM_TRIALS = "SORT_BY_NUM_TRIALS"
    NAME = "SORT_BY_NAME"


class ModelSortBy(enum.Enum):
    """Model fields ``get_models`` / ``list_models`` sort by."""

    NAME = "SORT_BY_NAME"
    DESCRIPTION = "SORT_BY_DESCRIPTION"
    CREATION_TIME = "SORT_BY_CREATION_TIME"
    LAST_UPDATED_TIME = "SORT_BY_LAST_UPDATED_TIME"
    NUM_VERSIONS = "SORT_BY_NUM_VERSIONS"


class DownloadMode(enum.Enum):
    """How ``Checkpoint.download`` fetches: locally every mode copies the checkpoint directory."""

    DIRECT = "direct"
    MASTER = "master"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value
