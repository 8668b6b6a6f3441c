"""The single-process backend: one worker, collectives are identities."""

from __future__ import annotations

from typing import Any, List

from determined_lite.distributed._base import DistributedContext


class SingleProcessContext(DistributedContext, engine=True):
    """One worker on one slot; every collective returns its own input."""

    backend = "single"

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)

    @classmethod
    def from_environment(cls) -> "SingleProcessContext":
        """One process needs no environment."""
        return cls()

    def allgather(self, obj: Any) -> List[Any]:
        return [obj]

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        if root != 0:
            raise ValueError(f"broadcast root must be 0 in a single-process context, got {root}")
        return obj

    def barrier(self) -> None:
        return None
