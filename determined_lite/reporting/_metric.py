"""The one rule for the best searcher metric: what the loop, the store and the runner share."""

from __future__ import annotations

import math
from typing import Optional


def is_better(value: float, best: Optional[float], smaller_is_better: bool) -> bool:
    """Whether a searcher-metric ``value`` beats ``best``; NaN never does (and is never best)."""
    if math.isnan(value):
        return False
    if best is None or math.isnan(best):
        return True
    return value < best if smaller_is_better else value > best
