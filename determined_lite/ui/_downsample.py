"""Server-side down-sampling of learning curves: a bounded number of points per trial that keeps
every bucket's minimum and maximum, so spikes and the best value survive at any zoom-out.

The store keeps the buckets as metrics are written (``store.metrics.buckets``: per trial and
bucket of ``width`` batches, the first and last batch, the count of numbers, the minimum and
the maximum; ``_curves.py`` caches them and merges them to the chart's width); here each bucket
becomes one point (one number) or two (its minimum and maximum, at its first and last batch, in
the order that continues the curve from the previous point: a falling curve stays falling, a
rising one rising), and each curve ends on its exact last value (``store.metrics.last``). A
bucket of NaN only, and an infinite bound, is a gap (``None``: JSON has no NaN or infinity).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

Bucket = Tuple[int, int, int, int, float, float]  # trial, first batch, last batch, rows, min, max

MAX_POINTS = 10000  # buckets per trial a request may ask for


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _points(bucket: Bucket, previous: Optional[float]) -> List[Tuple[int, Optional[float]]]:
    """The bucket's one or two points, the one nearer ``previous`` first."""
    _, first, last, rows, low, high = bucket
    if rows == 0:
        return [(first, None)]
    if rows == 1 or low == high:
        return [(first, _finite(low))]
    if previous is not None and abs(previous - high) < abs(previous - low):
        return [(first, _finite(high)), (last, _finite(low))]
    return [(first, _finite(low)), (last, _finite(high))]


def _ending(bucket: Bucket, previous: Optional[float], value: float) -> List[Tuple[int, Optional[float]]]:
    """The points of the bucket whose last batch holds the curve's last value ``value``: its
    extremes, then that value at its last batch."""
    _, first, last, rows, low, high = bucket
    if rows == 1 or low == high:
        return [(last, _finite(value))] if first == last else [(first, _finite(low)), (last, _finite(value))]
    if value in (low, high):
        other = high if value == low else low
        return [(first, _finite(other)), (last, _finite(value))]
    near, far = _points(bucket, previous)  # 3 numbers or more: last - 1 > first
    return [near, (last - 1, far[1]), (last, _finite(value))]


def curves(
    buckets: Iterable[Bucket],
    trial_ids: Sequence[int],
    last: Optional[Mapping[int, Tuple[int, float]]] = None,
) -> List[Dict[str, Any]]:
    """One series per trial of ``trial_ids`` (in that order, empty when it reported nothing):
    ``{"trial_id", "x": [batches], "y": [values], "rows": n}``; ``rows`` counts the numbers
    the series stands for. ``last``: each trial's last reported ``(batch, value)``, where the
    series then ends exactly (after its final bucket's extremes)."""
    series: Dict[int, Dict[str, Any]] = {t: {"trial_id": t, "x": [], "y": [], "rows": 0} for t in trial_ids}
    ends = last or {}
    for bucket in buckets:
        one = series.get(bucket[0])
        if one is None:
            continue
        previous = one["y"][-1] if one["y"] else None
        end = ends.get(bucket[0])
        if end is not None and bucket[3] > 0 and end[0] == bucket[2]:
            points = _ending(bucket, previous, end[1])
        else:
            points = _points(bucket, previous)
        for x, y in points:
            one["x"].append(x)
            one["y"].append(y)
        one["rows"] += bucket[3]
    return [series[t] for t in trial_ids]
