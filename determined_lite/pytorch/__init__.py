"""Determined's ``determined.pytorch`` trial API, run locally.

Subclass :class:`PyTorchTrial`, wrap models/optimizers/schedulers with the
:class:`PyTorchTrialContext`, and train with ``init()`` + ``Trainer(...).fit()``. Ready-made
callbacks (det-lite's own): :mod:`determined_lite.pytorch.callbacks`.
"""

from determined_lite.config.units import Batch, Epoch, Record
from determined_lite.pytorch import callbacks as callbacks  # det-lite's, kept out of __all__ (*)
from determined_lite.pytorch import samplers
from determined_lite.pytorch._callback import (
    CallbackError,
    PyTorchCallback,
    RemovableHandle,
    register_global_callback,
)
from determined_lite.pytorch._context import PyTorchExperimentalContext, PyTorchTrialContext
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._device import TorchData, to_device
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._interrupt import FitInterrupted
from determined_lite.pytorch._load import load_trial_from_checkpoint_path
from determined_lite.pytorch._lr_scheduler import LRScheduler
from determined_lite.pytorch._reducer import MetricReducer, Reducer
from determined_lite.pytorch._train_result import TrainResult
from determined_lite.pytorch._trainer import Trainer, init
from determined_lite.pytorch._trial import PyTorchTrial, data_length

# Determined's name for LRScheduler.StepMode.
LRSchedulerStepMode = LRScheduler.StepMode

# (*) The `determined` alias mirrors __all__: Determined has no ready-made callbacks.
__all__ = [
    "Batch",
    "CallbackError",
    "DataLoader",
    "Epoch",
    "FitInterrupted",
    "LRScheduler",
    "LRSchedulerStepMode",
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
    "to_device",
]
