"""Server-side down-sampling of learning curves: a bounded number of points per trial that keeps
every bucket's minimum and maximum, so spikes and the best value survive at any zoom-out.

The store does the heavy part in SQLite (``Store.metric_buckets``: per trial and bucket of
``width`` batches, the first and last batch, the row count, the minimum and the maximum;
``_curves.py`` caches them and merges them to the chart's width); here
each bucket becomes one point (one row) or two (its minimum and maximum, at its first and last
batch, in the order that continues the curve from the previous point: a falling curve stays
falling, a rising one rising).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

Bucket = Tuple[int, int, int, int, float, float]  # trial, first batch, last batch, rows, min, max

MAX_POINTS = 10000  # buckets per trial a request may ask for


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _points(bucket: Bucket, previous: Optional[float]) -> List[Tuple[int, Optional[float]]]:
    """The bucket's one or two points, the one nearer ``previous`` first."""
    _, first, last, rows, low, high = bucket
    if rows == 1 or low == high:
        return [(first, _finite(low))]
    if previous is not None and abs(previous - high) < abs(previous - low):
        return [(first, _finite(high)), (last, _finite(low))]
    return [(first, _finite(low)), (last, _finite(high))]


def curves(buckets: Iterable[Bucket], trial_ids: Sequence[int]) -> List[Dict[str, Any]]:
    """One series per trial of ``trial_ids`` (in that order, empty when it reported nothing):
    ``{"trial_id", "x": [batches], "y": [values], "rows": n}``; ``rows`` counts the reports
    the series stands for."""
    series: Dict[int, Dict[str, Any]] = {t: {"trial_id": t, "x": [], "y": [], "rows": 0} for t in trial_ids}
    for bucket in buckets:
        one = series.get(bucket[0])
        if one is None:
            continue
        previous = one["y"][-1] if one["y"] else None
        for x, y in _points(bucket, previous):
            one["x"].append(x)
            one["y"].append(y)
        one["rows"] += bucket[3]
    return [series[t] for t in trial_ids]
