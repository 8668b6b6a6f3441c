"""A trial's progress as its chief measures it, and the one line a progress bar shows for it.

The chief worker measures (``pytorch/_progress.py``); the runner reads it from the trial's
progress file (experiments), or ``Trainer.fit`` draws it directly (plain Python). Throughput
is counted from the end of the run's first batch, so start-up (imports, data loaders, CUDA
initialisation, restoring a checkpoint) does not drag it down and the ETA is honest.
Standard library only: the runner reads this without importing torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any, Dict, List, Optional

from determined_lite._terminal import bar_line, format_duration, format_number, format_rate


@dataclasses.dataclass
class TrialProgress:
    """Where a trial's run stands (batches count from the start of the trial, not of this run)."""

    total_batches: int = 0
    max_batches: Optional[int] = None
    batches_per_s: Optional[float] = None  # since the end of this run's first batch
    loss: Optional[float] = None  # the chief's latest training batch
    metric: Optional[str] = None  # the searcher metric's name
    metric_value: Optional[float] = None  # its latest validation value
    validating: bool = False

    @property
    def eta_s(self) -> Optional[float]:
        """Seconds to ``max_batches`` at the measured throughput (None until it is measured)."""
        if not self.batches_per_s or self.max_batches is None:
            return None
        return max(0, self.max_batches - self.total_batches) / self.batches_per_s

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TrialProgress":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def stats(self, elapsed_s: Optional[float]) -> List[str]:
        """``["00:04<00:01", "72.8 batch/s", "loss=0.0413", "accuracy=0.975"]``: what the bar shows
        after the counts (elapsed time is the caller's: since the bar appeared)."""
        parts = []
        if elapsed_s is not None:
            eta = self.eta_s
            parts.append(f"{format_duration(elapsed_s)}<{'?' if eta is None else format_duration(eta)}")
        if self.batches_per_s:
            parts.append(format_rate(self.batches_per_s))
        if self.loss is not None:
            parts.append(f"loss={format_number(self.loss)}")
        if self.metric is not None and self.metric_value is not None:
            parts.append(f"{self.metric}={format_number(self.metric_value)}")
        if self.validating:
            parts.append("validating")
        return parts

    def line(self, label: str, width: int, elapsed_s: Optional[float] = None) -> str:
        """The progress bar of this trial, at most ``width`` characters."""
        return bar_line(label, self.total_batches, self.max_batches, width, self.stats(elapsed_s))


def write_json_atomic(path: str, data: Any, suffix: str = ".json") -> None:
    """Write ``data`` as JSON to ``path`` whole (renamed into place from ``.tmp-*<suffix>``
    beside it), 0600, not fsynced: for files that matter only while their processes live."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)  # 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, default=str))  # the C encoder: json.dump streams in Python
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_progress(path: str, progress: TrialProgress) -> None:
    """Replace the progress file at ``path`` (no fsync: it is rewritten often and only a
    progress bar reads it)."""
    write_json_atomic(path, progress.to_json(), ".progress")


def read_progress(path: str) -> Optional[TrialProgress]:
    """The progress file at ``path``, or None when there is none (yet) or it cannot be read."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return TrialProgress.from_json(data) if isinstance(data, dict) else None
