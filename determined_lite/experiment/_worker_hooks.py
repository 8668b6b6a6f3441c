"""What a chief worker of an experiment trial adds to the loop: store writes and the stop poll."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from determined_lite.launch._spec import WorkerSpec


def worker_hooks(
    spec: WorkerSpec, is_chief: bool
) -> Tuple[List[Tuple[str, Any]], Optional[Callable[[], bool]]]:
    """Core callbacks writing to the store (chief only) and ``should_stop`` for pause/kill."""
    return [], None
