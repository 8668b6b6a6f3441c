"""The metric tables: a trial's training and validation reports, the buckets the dashboard's
curves read (``_buckets.py``) and ``describe``'s workloads (``_workloads.py``)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Sequence, Tuple

from determined_lite.store import _buckets
from determined_lite.store._db import NotFoundError, Repository, dumps_json, loads_json
from determined_lite.store._workloads import Workload, trial_workloads

_METRIC_TABLES = _buckets.METRIC_TABLES


class Metrics(Repository):
    """Trials' metrics (``store.metrics``); writing to an unknown trial raises ``NotFoundError``."""

    def _add_metrics(self, kind: str, trial_id: int, total_batches: int, metrics: Dict[str, Any]) -> None:
        table = _METRIC_TABLES[kind]
        text = dumps_json(metrics, f"{table.replace('_', ' ')}")
        now = time.time()

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE trials SET total_batches = MAX(total_batches, ?) WHERE id = ?",
                (int(total_batches), int(trial_id)),
            )
            if cursor.rowcount == 0:
                raise NotFoundError(f"trial {trial_id} not found")
            previous = _buckets.top(conn, kind, int(trial_id))
            conn.execute(
                f"INSERT INTO {table} (trial_id, total_batches, metrics, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (trial_id, total_batches) DO UPDATE SET metrics = excluded.metrics,"
                " created_at = excluded.created_at",
                (int(trial_id), int(total_batches), text, now),
            )
            _buckets.record(conn, kind, int(trial_id), int(total_batches), metrics, previous)

        self.db.write(body)

    def add_training(self, trial_id: int, total_batches: int, metrics: Dict[str, Any]) -> None:
        """Training metrics reported at ``total_batches`` (one row per batch count: a re-report
        after a restart replaces it). Raises the trial's ``total_batches`` to at least this."""
        self._add_metrics("training", trial_id, total_batches, metrics)

    def add_validation(self, trial_id: int, total_batches: int, metrics: Dict[str, Any]) -> None:
        """Validation metrics at ``total_batches``; same rules as ``add_training``."""
        self._add_metrics("validation", trial_id, total_batches, metrics)

    def delete_after(self, trial_id: int, total_batches: int) -> None:
        """Forget the metrics reported after batch ``total_batches`` and lower the trial's
        ``total_batches`` to it: a trial resumed from its checkpoint there re-reports them (and
        the buckets kept for the dashboard lose them too)."""

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE trials SET total_batches = MIN(total_batches, ?) WHERE id = ?",
                (int(total_batches), int(trial_id)),
            )
            if cursor.rowcount == 0:
                raise NotFoundError(f"trial {trial_id} not found")
            _buckets.forget_after(conn, int(trial_id), int(total_batches))

        self.db.write(body)

    def _metrics(self, table: str, trial_id: int) -> List[Dict[str, Any]]:
        rows = self.db.read(
            lambda conn: conn.execute(
                f"SELECT total_batches, metrics FROM {table} WHERE trial_id = ? ORDER BY total_batches",
                (int(trial_id),),
            ).fetchall()
        )
        return [{"total_batches": r[0], "metrics": loads_json(r[1])} for r in rows]

    def training(self, trial_id: int) -> List[Dict[str, Any]]:
        """``[{"total_batches", "metrics"}]`` by batch."""
        return self._metrics("training_metrics", trial_id)

    def has_training_report(self, trial_id: int, total_batches: int) -> bool:
        """Whether the trial reported training metrics at ``total_batches`` (an index lookup)."""
        row = self.db.read(
            lambda conn: conn.execute(
                "SELECT 1 FROM training_metrics WHERE trial_id = ? AND total_batches = ? LIMIT 1",
                (int(trial_id), int(total_batches)),
            ).fetchone()
        )
        return row is not None

    def validation(self, trial_id: int) -> List[Dict[str, Any]]:
        """``[{"total_batches", "metrics"}]`` by batch."""
        return self._metrics("validation_metrics", trial_id)

    def workloads(self, trial_ids: Sequence[int], every: bool = False) -> Tuple[List[Workload], bool]:
        """The trials' workloads as ``describe`` shows them (``_workloads.py``: one row per
        batch count, by trial then batch; by default each trial's validations, checkpoints and
        latest training report, with ``every`` every training report too), read in one
        snapshot, and whether training rows were left out."""

        def body(conn: sqlite3.Connection) -> Tuple[List[Workload], bool]:
            rows: List[Workload] = []
            left_out = False
            for trial_id in trial_ids:
                found, more = trial_workloads(conn, int(trial_id), bool(every))
                rows.extend(found)
                left_out = left_out or more
            return rows, left_out

        return self.db.read(body)

    def names(self, trial_ids: Sequence[int]) -> Dict[str, List[str]]:
        """``{"training": [...], "validation": [...]}``: the metric names in the first and last
        report of each of ``trial_ids`` (sorted; read without scanning every row)."""
        ids = [int(t) for t in trial_ids]

        def body(conn: sqlite3.Connection) -> Dict[str, List[str]]:
            names: Dict[str, List[str]] = {}
            for kind, table in _METRIC_TABLES.items():
                found: set = set()
                for order in ("ASC", "DESC"):
                    for trial_id in ids:
                        row = conn.execute(
                            f"SELECT metrics FROM {table} WHERE trial_id = ? ORDER BY total_batches {order}"
                            " LIMIT 1",
                            (trial_id,),
                        ).fetchone()
                        if row is not None and isinstance(metrics := loads_json(row[0]), dict):
                            found.update(str(k) for k in metrics)
                names[kind] = sorted(found)
            return names

        return self.db.read(body)

    def buckets(
        self, trial_ids: Sequence[int], kind: str, name: str, width: int, after: int = 0
    ) -> List[Tuple[int, int, int, int, float, float]]:
        """Metric ``name`` of ``kind`` (``training`` or ``validation``) for ``trial_ids``, in
        buckets of ``width`` batches (a power of two; bucket ``i``: batches ``i * width`` to
        ``(i + 1) * width - 1``; where the store keeps coarser buckets, those), the buckets from
        the one holding batch ``after`` on: ``(trial_id, first batch, last batch, numbers,
        minimum, maximum)`` by trial then bucket; a bucket of NaN only has no numbers and NaN
        bounds. Read from the buckets the write path keeps (``_buckets.py``): at most
        ``_buckets.MAX_BUCKETS`` rows per trial, whatever the number of reports."""
        self._check_kind(kind)
        ids = [int(t) for t in trial_ids]
        width = max(int(width), 1)
        return self.db.read(lambda conn: _buckets.read(conn, ids, kind, str(name), width, int(after)))

    def last(self, trial_ids: Sequence[int], kind: str, name: str) -> Dict[int, Tuple[int, float]]:
        """``{trial_id: (batch, value)}``: each trial's last number reported as ``name``, exact
        (left out when the last bucket with numbers ends on a NaN, or there is none)."""
        self._check_kind(kind)
        ids = [int(t) for t in trial_ids]
        return self.db.read(lambda conn: _buckets.last_points(conn, ids, kind, str(name)))

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in _METRIC_TABLES:
            raise ValueError(f"metric kind must be one of {', '.join(_METRIC_TABLES)}; got {kind!r}")
