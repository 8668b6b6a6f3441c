"""``determined.pytorch`` for det-lite: Determined's trial API names, bound to det-lite's objects."""

from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.pytorch import (
    Batch,
    CallbackError,
    DataLoader,
    Epoch,
    LRScheduler,
    MetricReducer,
    PyTorchCallback,
    PyTorchExperimentalContext,
    PyTorchTrial,
    PyTorchTrialContext,
    Record,
    Reducer,
    RemovableHandle,
    TorchData,
    Trainer,
    TrainResult,
    TrialInfo,
    data_length,
    init,
    load_trial_from_checkpoint_path,
    register_global_callback,
)

from . import samplers


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)


__all__ = [
    "Batch",
    "CallbackError",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Record",
    "Reducer",
    "RemovableHandle",
    "TorchData",
    "TrainResult",
    "Trainer",
    "TrialInfo",
    "data_length",
    "init",
    "load_trial_from_checkpoint_path",
    "register_global_callback",
    "samplers",
]
