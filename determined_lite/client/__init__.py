"""Determined's Python SDK (``determined.experimental.client``) over det-lite's local store.

Experiments, trials, checkpoints and the model registry are read from (and written to) the
SQLite store of ``$DET_LITE_HOME``, where Determined's SDK talks to a master. The module-level
functions (``login``, ``get_experiment``, ``create_model``, ...) use one ``Determined``
object, as Determined's do; control (create, pause, kill, activate) goes through the functions
``det-lite experiment ...`` uses. Modules, one job each:

* ``_enums.py``: Determined's enums (states, sort keys, ``OrderBy``) with its names and values;
* ``_session.py``: which store file the objects use;
* ``_experiment.py``, ``_trial.py``, ``_checkpoint.py``, ``_model.py``: the objects;
* ``_sorting.py``: Determined's checkpoint order (searcher metric and direction by default);
* ``_control.py``: create / pause / kill / activate;
* ``_errors.py``: Determined's error types (``determined.common.api.errors``);
* ``_determined.py``: ``Determined``; ``_functions.py``: the module-level functions.

What differs from Determined: docs/migrating-from-determined.md.
"""

from determined_lite.client._checkpoint import Checkpoint, CheckpointTrainingMetadata
from determined_lite.client._control import ExperimentCreateError
from determined_lite.client._determined import Determined
from determined_lite.client._enums import (
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
    ExperimentSortBy,
    ExperimentState,
    ModelSortBy,
    OrderBy,
    TrialSortBy,
    TrialState,
)
from determined_lite.client._experiment import Experiment
from determined_lite.client._functions import (
    create_experiment,
    create_model,
    get_checkpoint,
    get_experiment,
    get_model,
    get_model_by_id,
    get_models,
    get_trial,
    iter_trials_metrics,
    list_experiments,
    list_models,
    login,
    stream_trials_metrics,
    stream_trials_training_metrics,
    stream_trials_validation_metrics,
)
from determined_lite.client._model import Model, ModelVersion
from determined_lite.client._trial import TrainingMetrics, Trial, TrialMetrics, ValidationMetrics

__all__ = [
    "Checkpoint",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTrainingMetadata",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentCreateError",
    "ExperimentSortBy",
    "ExperimentState",
    "Model",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialSortBy",
    "TrialState",
    "ValidationMetrics",
    "create_experiment",
    "create_model",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_models",
    "get_trial",
    "iter_trials_metrics",
    "list_experiments",
    "list_models",
    "login",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
]
