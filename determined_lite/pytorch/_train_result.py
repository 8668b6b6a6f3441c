"""What one ``fit`` did: :class:`TrainResult` (the loop in ``_controller.py`` fills it)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional

from determined_lite.config import DEFAULT_SMALLER_IS_BETTER
from determined_lite.pytorch._schedule import is_better


@dataclasses.dataclass
class TrainResult:
    """What one ``fit`` did: reported metrics and the checkpoints it wrote.

    Each of ``checkpoints`` has ``uuid``, ``path``, ``total_batches``, ``metrics`` (the
    validation at its batch, else None) and ``deleted``: whether it was gone from disk when
    ``fit`` returned (the retention policy keeps the best and the latest by default).
    ``latest_checkpoint`` and ``best_checkpoint`` only name checkpoints still on disk.
    """

    total_batches: int = 0
    training_metrics: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    validation_metrics: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    checkpoints: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    best_validation: Optional[float] = None
    stopped_early: bool = False
    searcher_metric: Optional[str] = None
    smaller_is_better: bool = DEFAULT_SMALLER_IS_BETTER

    def live_checkpoints(self) -> List[Dict[str, Any]]:
        """The checkpoints still on disk, oldest first."""
        return [c for c in self.checkpoints if os.path.isdir(c["path"])]

    def mark_deleted(self) -> None:
        """Set each checkpoint's ``deleted`` from the disk (after retention ran)."""
        for c in self.checkpoints:
            c["deleted"] = not os.path.isdir(c["path"])

    @property
    def latest_checkpoint(self) -> Optional[str]:
        """The path of the newest checkpoint still on disk: ``fit(latest_checkpoint=...)``
        resumes from it; None when none is left."""
        live = self.live_checkpoints()
        return live[-1]["path"] if live else None

    @property
    def best_checkpoint(self) -> Optional[str]:
        """The path of the checkpoint still on disk whose validation (at its batch) has the best
        searcher metric, the later one on a tie; None without a searcher metric or such a checkpoint."""
        name, best, path = self.searcher_metric, None, None
        for c in self.live_checkpoints():
            value = (c["metrics"] or {}).get(name) if name is not None else None
            better = isinstance(value, (int, float)) and is_better(value, best, self.smaller_is_better)
            if better or (value is not None and value == best):
                best, path = value, c["path"]
        return path
