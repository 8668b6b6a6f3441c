"""Learning curves for the dashboard: every trial's metric in min/max buckets, kept in memory and
extended with only the buckets that changed since, so that a live page's refresh reads little.

The store keeps each curve down-sampled as it is written (``store.metrics.buckets``: at most
1024 buckets of a power-of-two width per trial, merged to the asked width in SQLite), so a read
touches at most that many rows per trial whatever the number of reports. A chart asks for about
``points`` buckets per trial (at most ``2 * BASE_BUCKETS``), which makes one power-of-two
``width`` for all its trials; per trial, kind and metric the cache holds the buckets of that
width (an entry coarsened when a later chart's width is larger, which is exact for minima,
maxima and counts; read again when it is smaller). A refresh reads again the buckets from the
last one read on and replaces them. A trial that restarted (its metrics after the checkpoint
are replaced) is read again from scratch.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
from typing import Any, Dict, List, Sequence, Tuple

from determined_lite.store import Store
from determined_lite.ui._downsample import Bucket

BASE_BUCKETS = 512  # a chart asks for at most 2 * BASE_BUCKETS per trial: the store keeps 1024
TOTAL_POINTS = 20000  # a chart of many trials gets fewer buckets per trial
MIN_POINTS, MAX_POINTS = 100, 1000
MAX_ENTRIES = 4000  # cached curves (trial, kind, metric); the oldest go first
SCAN_THREADS = 2

Cell = List[Any]  # [first batch, last batch, rows, minimum, maximum]


def default_points(trials: int) -> int:
    """Buckets per trial for a chart of ``trials`` curves."""
    return max(MIN_POINTS, min(MAX_POINTS, TOTAL_POINTS // max(trials, 1)))


def _pow2(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _merge(cell: Cell, other: Sequence[Any]) -> None:
    """Fold ``other`` into ``cell``; a NaN bound (a bucket of NaN only) gives way to a number."""
    cell[0], cell[1] = min(cell[0], other[0]), max(cell[1], other[1])
    cell[2] += other[2]
    if other[2]:
        cell[3] = other[3] if math.isnan(cell[3]) else min(cell[3], other[3])
        cell[4] = other[4] if math.isnan(cell[4]) else max(cell[4], other[4])


def _rebucket(buckets: Dict[int, Cell], factor: int) -> Dict[int, Cell]:
    """``buckets`` merged ``factor`` (a power of two) at a time."""
    if factor == 1:
        return buckets
    merged: Dict[int, Cell] = {}
    for index in sorted(buckets):
        cell = buckets[index]
        target = merged.get(index // factor)
        if target is None:
            merged[index // factor] = list(cell)
        else:
            _merge(target, cell)
    return merged


@dataclasses.dataclass
class _Curve:
    width: int
    restarts: int
    upto: int = 0  # the last batch read
    buckets: Dict[int, Cell] = dataclasses.field(default_factory=dict)
    view: Tuple[int, int, List[Cell]] = (0, -1, [])  # (width, upto, cells): the last answer

    def cells(self, width: int) -> List[Cell]:
        """The buckets merged to ``width`` batches (a multiple of ``self.width``), by batch."""
        if self.view[:2] != (width, self.upto):
            merged = _rebucket(self.buckets, width // self.width)
            self.view = (width, self.upto, [merged[i] for i in sorted(merged)])
        return self.view[2]


class CurveCache:
    """Cached bucketed curves over ``store``; safe to share between the server's threads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._curves: Dict[Tuple[int, str, str], _Curve] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            SCAN_THREADS, thread_name_prefix="det-lite-ui-scan"
        )

    def _curve(self, trial: Dict[str, Any], kind: str, metric: str, width: int) -> _Curve:
        """The trial's cache entry in buckets of ``width`` batches: read again when the trial
        restarted or was rewound or the entry is coarser; coarsened (exact) when it is finer."""
        key = (trial["id"], kind, metric)
        batches = int(trial["total_batches"] or 0)
        curve = self._curves.get(key)
        if (
            curve is None
            or curve.restarts != trial["restarts"]
            or batches < curve.upto
            or width < curve.width
        ):
            curve = _Curve(width=width, restarts=trial["restarts"])
            self._curves.pop(key, None)
            self._curves[key] = curve
            while len(self._curves) > MAX_ENTRIES:
                self._curves.pop(next(iter(self._curves)))
        if curve.width < width:
            curve.buckets, curve.width = _rebucket(curve.buckets, width // curve.width), width
            curve.view = (0, -1, [])
        return curve

    def _scan(self, groups: Dict[Tuple[int, int], List[int]], kind: str, metric: str) -> List[Bucket]:
        """The buckets of each group of trials (same width, read up to the same batch) from the one
        holding that batch on, in parallel."""
        jobs = []
        for (width, upto), ids in groups.items():
            half = (len(ids) + 1) // 2
            for part in (ids[:half], ids[half:]) if len(ids) > 1 else (ids,):
                jobs.append(self._pool.submit(self.store.metrics.buckets, part, kind, metric, width, upto))
        found: List[Bucket] = []
        for job in jobs:
            found.extend(job.result())
        return found

    def buckets(
        self, trials: Sequence[Dict[str, Any]], kind: str, metric: str, points: int
    ) -> Tuple[int, List[Bucket]]:
        """``(width, buckets)``: each trial's curve in about ``points`` buckets of ``width`` batches,
        by trial then batch (``trials``: store rows with ``id``, ``total_batches``, ``restarts``)."""
        longest = max((int(t["total_batches"] or 0) for t in trials), default=0)
        width = _pow2(longest / max(min(points, 2 * BASE_BUCKETS), 1))
        with self._lock:
            curves = {t["id"]: self._curve(t, kind, metric, width) for t in trials}
            groups: Dict[Tuple[int, int], List[int]] = {}
            for trial_id, curve in curves.items():
                groups.setdefault((curve.width, curve.upto), []).append(trial_id)
            for curve in curves.values():  # read again, whole: the buckets from the last one read on
                start = curve.upto // curve.width
                curve.buckets = {i: cell for i, cell in curve.buckets.items() if i < start}
            for trial_id, first, last, rows, low, high in self._scan(groups, kind, metric):
                curve = curves[trial_id]
                curve.buckets[first // curve.width] = [first, last, rows, low, high]
                curve.upto = max(curve.upto, last)
            out: List[Bucket] = []
            for trial_id, curve in curves.items():
                out.extend((trial_id, *cell) for cell in curve.cells(width))
            return width, out

    def close(self) -> None:
        self._pool.shutdown(wait=False)
