"""``determined.experimental``: Determined's Python SDK over det-lite's local store
(``determined_lite.client``); ``from determined.experimental import client`` as in Determined."""

from determined_lite.client import (
    Checkpoint,
    CheckpointSortBy,
    Determined,
    Experiment,
    Model,
    ModelSortBy,
    ModelVersion,
    OrderBy,
    Trial,
    TrialSortBy,
)

from . import client

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "Determined",
    "Experiment",
    "Model",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "Trial",
    "TrialSortBy",
    "client",
]
