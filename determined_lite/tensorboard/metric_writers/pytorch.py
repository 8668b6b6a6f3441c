"""TorchWriter: a ``torch.utils.tensorboard.SummaryWriter`` aimed at the trial's directory."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

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

    def add_hparams_session(self, hparams: Dict[str, Any]) -> None:
        """Make this directory one row (a session) of TensorBoard's HParams table.

        Only the session's start info is written, into this directory (``SummaryWriter.add_hparams``
        would open a sub-run per call and repeat the metrics there): the plugin reads the
        hyperparameters of every trial directory and takes the metric columns from the scalars
        they hold (``validation/<name>``, ``training/<name>``). Nested hyperparameters are
        named with dots; lists and mappings are shown as JSON.
        """
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        _, session_start, _ = hparams_summaries(flat_hparams(hparams), {})
        file_writer: Any = self.writer.file_writer  # set by SummaryWriter.__init__
        file_writer.add_summary(session_start)

    def flush(self) -> None:
        self.writer.flush()

    def reset(self) -> None:
        """Flush and close the files (e.g. at the end of a trial)."""
        self.writer.close()

    close = reset


def flat_hparams(hparams: Dict[str, Any], prefix: str = "") -> Dict[str, Union[int, float, str, bool]]:
    """``{"opt": {"lr": 0.1}, "sizes": [1, 2]}`` → ``{"opt.lr": 0.1, "sizes": "[1, 2]"}`` (what the
    HParams plugin can show: numbers, strings and booleans; None is left out)."""
    out: Dict[str, Union[int, float, str, bool]] = {}
    for name, value in hparams.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            out.update(flat_hparams(value, key + "."))
        elif isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif value is not None:
            out[key] = json.dumps(value, default=str)
    return out
