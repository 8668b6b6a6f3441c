"""TorchWriter: a ``torch.utils.tensorboard.SummaryWriter`` aimed at the trial's directory."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

import numpy as np

from determined_lite.store._paths import make_private_dirs
from determined_lite.tensorboard import get_base_path
from determined_lite.tensorboard._event_file import EventFile


class TorchWriter:
    """Writes tfevent files into the active trial's TensorBoard directory.

    ``add_scalar`` (accepts tensors and numpy values) and ``add_hparams_session`` write through
    det-lite's light event file (:mod:`determined_lite.tensorboard._event_file`); ``writer`` is
    a full ``torch.utils.tensorboard.SummaryWriter`` on the same directory, for any of its
    ``add_*`` methods, made on first use (importing it costs 6-15 MB, see that module).
    """

    def __init__(self, log_dir: Optional[str] = None) -> None:
        self.log_dir = log_dir or get_base_path()
        make_private_dirs(self.log_dir)
        self._events = EventFile(self.log_dir)
        self._summary_writer: Any = None

    @property
    def writer(self) -> Any:
        """The ``SummaryWriter`` on this directory (its own event file), made on first use."""
        if self._summary_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._summary_writer = SummaryWriter(log_dir=self.log_dir)
        return self._summary_writer

    def add_scalar(self, name: str, value: Union[int, float, np.number, Any], step: int) -> None:
        scalar: Any = value.item() if hasattr(value, "item") else value
        self._events.add_scalar(name, float(scalar), step)

    def add_hparams_session(self, hparams: Dict[str, Any]) -> None:
        """Make this directory one row (a session) of TensorBoard's HParams table.

        Only the session's start info is written, into this directory (``SummaryWriter.add_hparams``
        would open a sub-run per call and repeat the metrics there): the plugin reads the
        hyperparameters of every trial directory and takes the metric columns from the scalars
        they hold (``validation/<name>``, ``training/<name>``). Nested hyperparameters are
        named with dots; lists and mappings are shown as JSON.
        """
        self._events.add_hparams_session(flat_hparams(hparams))

    def flush(self) -> None:
        self._events.flush()
        if self._summary_writer is not None:
            self._summary_writer.flush()

    def reset(self) -> None:
        """Flush and close the files (e.g. at the end of a trial)."""
        self._events.close()
        if self._summary_writer is not None:
            self._summary_writer.close()

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
