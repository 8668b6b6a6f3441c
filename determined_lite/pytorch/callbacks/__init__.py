"""Ready-made callbacks (det-lite's; Determined has none of these, so the ``determined`` alias
does not provide them). Pass them to ``Trainer(trial, context, callbacks=[...])``, return them
from ``build_callbacks()``, or register them globally.

- :class:`EarlyStopping`: stop at the validation after which a metric stopped improving.
- :class:`CheckLoss`: fail at once, naming the batch, on a NaN or infinite loss.
- :class:`LRMonitor`: learning rates of every wrapped optimizer to TensorBoard.
- :class:`Throughput`: samples/s and batches/s at each report, start-up excluded.
- :class:`ModelSummary`: parameter counts of each wrapped model at the start of training.
- :class:`Profiler`: ``torch.profiler`` over chosen batches, traces in the trial's TensorBoard
  directory (also what ``context.set_profiler`` and the config's ``profiling`` section use).
"""

from determined_lite.pytorch.callbacks._check_loss import CheckLoss, NonFiniteLossError
from determined_lite.pytorch.callbacks._early_stopping import EarlyStopping
from determined_lite.pytorch.callbacks._lr_monitor import LRMonitor
from determined_lite.pytorch.callbacks._model_summary import ModelStats, ModelSummary
from determined_lite.pytorch.callbacks._profiler import Profiler
from determined_lite.pytorch.callbacks._throughput import Throughput

__all__ = [
    "CheckLoss",
    "EarlyStopping",
    "LRMonitor",
    "ModelStats",
    "ModelSummary",
    "NonFiniteLossError",
    "Profiler",
    "Throughput",
]
