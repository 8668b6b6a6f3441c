"""``determined.pytorch.experimental`` for det-lite: Determined's batch inference API
(``determined_lite.core._batch_process``)."""

from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.core._batch_process import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    get_default_device,
    torch_batch_process,
)

__all__ = ["TorchBatchProcessor", "TorchBatchProcessorContext", "get_default_device", "torch_batch_process"]


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
