"""TorchWriter: a ``torch.utils.tensorboard.SummaryWriter`` aimed at the trial's directory."""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from determined_lite.store._paths import make_private_dirs
from determined_lite.tensorboard import get_base_path


class TorchWriter:
    """Writes tfevent files into the active trial's TensorBoard directory.

    ``writer`` is the underlying ``SummaryWriter``, for any of its ``add_*`` methods;
    ``add_scalar`` is a shortcut that accepts tensors and numpy values.
    """

    def __init__(self, log_dir: Optional[str] = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        path = log_dir or get_base_path()
        make_private_dirs(path)
        self.writer = SummaryWriter(log_dir=path)

    def add_scalar(self, name: str, value: Union[int, float, np.number, Any], step: int) -> None:
        if hasattr(value, "item"):
            value = value.item()
        self.writer.add_scalar(name, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def reset(self) -> None:
        """Flush and close the files (e.g. at the end of a trial)."""
        self.writer.close()

    close = reset
