"""Down-sampled learning curves kept by the store's metric write path (the ``metric_buckets`` table).

Per trial, metric kind (``training``, ``validation``) and metric name, the store keeps at most
``MAX_BUCKETS`` buckets of a power-of-two width of batches: bucket ``i`` holds the reports of
batches ``i * width`` to ``(i + 1) * width - 1`` as its first and last batch, the count of its
numeric values (``rows``) and of its NaN values (``nans``), their minimum and maximum
(infinities included) and the value at its last batch (NULL when NaN). A (trial, kind)'s width
is a function of its largest reported batch (``bucket_width``): a report at or past
``MAX_BUCKETS * width`` doubles the width (or more), merging pairs of buckets, which is exact
for all of those. So a reader touches at most trials x ``MAX_BUCKETS`` rows whatever the number
of reports, and a report costs one index lookup (the largest batch) and one upsert per numeric
metric. A report at or before the largest batch (a re-report
after a restart replacing a row) rebuilds its bucket from the rows; forgetting the rows past a
batch (``Metrics.delete_after``) deletes the buckets past it and rebuilds the one holding it
(the whole series when the width must shrink). Values are read with Python's ``json``, so
NaN and infinities count (SQLite's JSON functions cannot read them).
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

MAX_BUCKETS = 1024
METRIC_TABLES = {"training": "training_metrics", "validation": "validation_metrics"}

# [first batch, last batch, rows, nans, low, high, last value]; low/high/last None: no number.
Cell = List[Any]

TABLE_STATEMENTS = [
    """CREATE TABLE metric_buckets (
        trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        bucket INTEGER NOT NULL,
        first INTEGER NOT NULL,
        last INTEGER NOT NULL,
        rows INTEGER NOT NULL,
        nans INTEGER NOT NULL,
        low REAL,
        high REAL,
        last_value REAL,
        PRIMARY KEY (trial_id, kind, name, bucket)
    ) WITHOUT ROWID""",
]

_COLUMNS = "trial_id, kind, name, bucket, first, last, rows, nans, low, high, last_value"
_INSERT = f"INSERT INTO metric_buckets ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Unqualified names are the stored row's; SQLite's two-argument MIN/MAX return NULL if either is.
_UPSERT = (
    _INSERT + " ON CONFLICT (trial_id, kind, name, bucket) DO UPDATE SET"
    " first = MIN(first, excluded.first), last = MAX(last, excluded.last),"
    " rows = rows + excluded.rows, nans = nans + excluded.nans,"
    " low = COALESCE(MIN(low, excluded.low), low, excluded.low),"
    " high = COALESCE(MAX(high, excluded.high), high, excluded.high),"
    " last_value = CASE WHEN excluded.last >= last THEN excluded.last_value ELSE last_value END"
)


def bucket_width(max_batches: int) -> int:
    """The smallest power of two that puts batches 0 to ``max_batches`` in ``MAX_BUCKETS`` buckets."""
    width = 1
    while max(int(max_batches), 0) // width >= MAX_BUCKETS:
        width *= 2
    return width


def numbers(metrics: Any) -> List[Tuple[str, float]]:
    """The numeric values of a report (bools, strings and lists are not curves)."""
    if not isinstance(metrics, Mapping):
        return []
    return [
        (str(k), float(v))
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]


def _cell(batch: int, value: float) -> Cell:
    if math.isnan(value):
        return [batch, batch, 0, 1, None, None, None]
    return [batch, batch, 1, 0, value, value, value]


def merge(cell: Cell, other: Cell) -> None:
    """Fold ``other`` (a cell of the same bucket) into ``cell``."""
    if other[1] >= cell[1]:
        cell[6] = other[6]
    cell[0], cell[1] = min(cell[0], other[0]), max(cell[1], other[1])
    cell[2] += other[2]
    cell[3] += other[3]
    for i, pick in ((4, min), (5, max)):
        cell[i] = other[i] if cell[i] is None else cell[i] if other[i] is None else pick(cell[i], other[i])


def bucket_rows(trial_id: int, kind: str, cells: Mapping[Tuple[str, int], Cell]) -> List[Tuple[Any, ...]]:
    """``cells`` (by (name, bucket)) as ``metric_buckets`` rows."""
    return [(trial_id, kind, name, index, *cell) for (name, index), cell in cells.items()]


def accumulate(rows: Iterable[Tuple[int, str]], width: int) -> Dict[Tuple[str, int], Cell]:
    """Cells of metric rows ``(total_batches, metrics JSON)`` at ``width`` (in any order)."""
    cells: Dict[Tuple[str, int], Cell] = {}
    for batch, text in rows:
        index = batch // width
        for name, value in numbers(json.loads(text)):
            cell = cells.get((name, index))
            if cell is None:
                cells[(name, index)] = _cell(batch, value)
                continue
            if batch >= cell[1]:
                cell[1], cell[6] = batch, None if value != value else value
            cell[0] = min(cell[0], batch)
            if value != value:  # NaN
                cell[3] += 1
            elif cell[2] == 0:
                cell[2], cell[4], cell[5] = 1, value, value
            else:
                cell[2] += 1
                cell[4], cell[5] = min(cell[4], value), max(cell[5], value)
    return cells


def record(
    conn: sqlite3.Connection, kind: str, trial_id: int, batch: int, metrics: Any, previous: Optional[int]
) -> None:
    """Add the report just written at ``batch`` to the buckets; ``previous``: the kind's largest
    reported batch before it (None: the first report)."""
    width = bucket_width(max(previous or 0, batch))
    if previous is not None:
        old = bucket_width(previous)
        if width > old:
            _coarsen(conn, kind, trial_id, width // old)
        if batch <= previous:
            _rebuild(conn, kind, trial_id, width, batch // width)
            return
    index = batch // width
    conn.executemany(
        _UPSERT, [(trial_id, kind, name, index, *_cell(batch, value)) for name, value in numbers(metrics)]
    )


def _coarsen(conn: sqlite3.Connection, kind: str, trial_id: int, factor: int) -> None:
    """Merge the (trial, kind)'s buckets ``factor`` (a power of two) at a time. Each width
    doubling merges at most ``MAX_BUCKETS`` buckets per name, and it comes once the largest batch
    has doubled: amortized, about two merged rows per name and report."""
    merged: Dict[Tuple[str, int], Cell] = {}
    for row in conn.execute(
        "SELECT name, bucket, first, last, rows, nans, low, high, last_value FROM metric_buckets"
        " WHERE trial_id = ? AND kind = ? ORDER BY name, bucket",
        (trial_id, kind),
    ):
        key, cell = (row[0], row[1] // factor), list(row[2:])
        if key in merged:
            merge(merged[key], cell)
        else:
            merged[key] = cell
    conn.execute("DELETE FROM metric_buckets WHERE trial_id = ? AND kind = ?", (trial_id, kind))
    conn.executemany(_INSERT, bucket_rows(trial_id, kind, merged))


def _rebuild(conn: sqlite3.Connection, kind: str, trial_id: int, width: int, index: int) -> None:
    """Bucket ``index`` of the (trial, kind) read again from its rows."""
    conn.execute(
        "DELETE FROM metric_buckets WHERE trial_id = ? AND kind = ? AND bucket = ?", (trial_id, kind, index)
    )
    rows = conn.execute(
        f"SELECT total_batches, metrics FROM {METRIC_TABLES[kind]} WHERE trial_id = ?"
        " AND total_batches BETWEEN ? AND ?",
        (trial_id, index * width, (index + 1) * width - 1),
    )
    conn.executemany(_INSERT, bucket_rows(trial_id, kind, accumulate(rows, width)))


def top(conn: sqlite3.Connection, kind: str, trial_id: int) -> Optional[int]:
    """The (trial, kind)'s largest reported batch (None: no report)."""
    found = conn.execute(
        f"SELECT MAX(total_batches) FROM {METRIC_TABLES[kind]} WHERE trial_id = ?", (trial_id,)
    ).fetchone()
    return None if found[0] is None else int(found[0])


def _rebuild_kind(conn: sqlite3.Connection, kind: str, trial_id: int) -> None:
    conn.execute("DELETE FROM metric_buckets WHERE trial_id = ? AND kind = ?", (trial_id, kind))
    width = bucket_width(top(conn, kind, trial_id) or 0)
    rows = conn.execute(
        f"SELECT total_batches, metrics FROM {METRIC_TABLES[kind]} WHERE trial_id = ?", (trial_id,)
    )
    conn.executemany(_INSERT, bucket_rows(trial_id, kind, accumulate(rows, width)))


def rebuild_series(conn: sqlite3.Connection) -> None:
    """Every trial's buckets read from its metric rows: the v4 migration's backfill."""
    for (trial_id,) in conn.execute("SELECT id FROM trials").fetchall():
        for kind in METRIC_TABLES:
            _rebuild_kind(conn, kind, trial_id)


def forget_after(conn: sqlite3.Connection, trial_id: int, batch: int) -> None:
    """Delete the trial's metric rows past ``batch``, and their buckets: the bucket holding
    ``batch`` is read again from its rows, or, when the largest batch left needs a finer
    width, the whole series (a restart that goes back past a width doubling)."""
    for kind, table in METRIC_TABLES.items():
        before = top(conn, kind, trial_id)
        conn.execute(f"DELETE FROM {table} WHERE trial_id = ? AND total_batches > ?", (trial_id, batch))
        if before is None or before <= batch:
            continue
        width = bucket_width(before)
        if bucket_width(top(conn, kind, trial_id) or 0) != width:
            _rebuild_kind(conn, kind, trial_id)
            continue
        conn.execute(
            "DELETE FROM metric_buckets WHERE trial_id = ? AND kind = ? AND bucket > ?",
            (trial_id, kind, batch // width),
        )
        _rebuild(conn, kind, trial_id, width, batch // width)


def read(
    conn: sqlite3.Connection, trial_ids: List[int], kind: str, name: str, width: int, after: int
) -> List[Tuple[int, int, int, int, float, float]]:
    """Stored buckets merged to ``width`` batches (a power of two; stored buckets coarser than
    that stay whole), the ones holding a batch at or past ``after // width * width`` (whole groups):
    ``(trial_id, first, last, rows, minimum, maximum)`` by trial then batch; NaN: no number."""
    rows = conn.execute(
        "SELECT trial_id, MIN(first), MAX(last), SUM(rows), MIN(low), MAX(high) FROM metric_buckets"
        " WHERE trial_id IN (SELECT value FROM json_each(?)) AND kind = ? AND name = ? AND last >= ?"
        " GROUP BY trial_id, first / ? ORDER BY trial_id, first / ?",
        (json.dumps(trial_ids), kind, name, after // width * width, width, width),
    ).fetchall()
    nan = math.nan
    return [(r[0], r[1], r[2], r[3], nan if r[4] is None else r[4], nan if r[5] is None else r[5])
            for r in rows]


def last_points(
    conn: sqlite3.Connection, trial_ids: List[int], kind: str, name: str
) -> Dict[int, Tuple[int, float]]:
    """``{trial_id: (batch, value)}``: the value at the last batch of each trial's last bucket
    of ``name`` with a number, when that value is one."""
    found: Dict[int, Tuple[int, float]] = {}
    for trial_id in trial_ids:
        row = conn.execute(
            "SELECT last, last_value FROM metric_buckets WHERE trial_id = ? AND kind = ? AND name = ?"
            " AND rows > 0 ORDER BY bucket DESC LIMIT 1",
            (trial_id, kind, name),
        ).fetchone()
        if row is not None and row[1] is not None:
            found[trial_id] = (row[0], row[1])
    return found
