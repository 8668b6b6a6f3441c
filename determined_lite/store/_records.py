"""Trial records in the det-lite SQLite file: metrics, checkpoints and logs.

``TrialRecords`` is the part of ``Store`` that appends to and reads a trial's history; the
experiment and trial rows themselves are ``Store``'s (``_store.py``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from determined_lite.store import _buckets
from determined_lite.store._db import Database, NotFoundError, dumps_json, loads_json
from determined_lite.store._workloads import Workload, trial_workloads

LogLine = Union[str, Tuple[Optional[int], str]]
_METRIC_TABLES = _buckets.METRIC_TABLES


def checkpoint_rows(conn: sqlite3.Connection, where: str, params: Tuple[Any, ...]) -> List[Dict[str, Any]]:
    """Checkpoint rows (joined with their trial's experiment) matching ``where``, by trial then batch."""
    rows = conn.execute(
        "SELECT c.uuid, c.trial_id, t.experiment_id, c.path, c.total_batches, c.metrics, c.state,"
        f" c.created_at FROM checkpoints c JOIN trials t ON t.id = c.trial_id WHERE {where}"
        " ORDER BY c.trial_id, c.total_batches, c.created_at, c.rowid",
        params,
    ).fetchall()
    return [
        {
            "uuid": r["uuid"],
            "trial_id": r["trial_id"],
            "experiment_id": r["experiment_id"],
            "path": r["path"],
            "total_batches": r["total_batches"],
            "metrics": loads_json(r["metrics"]),
            "state": r["state"],
            "created_at": r["created_at"],
        }
        for r in rows
    ]


class TrialRecords(Database):
    """Metrics, checkpoints and logs of trials (a base of ``Store``)."""

    # --- metrics ------------------------------------------------------------------------------

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

        self._write(body)

    def add_training_metrics(self, trial_id: int, total_batches: int, metrics: Dict[str, Any]) -> None:
        """Training metrics reported at ``total_batches`` (one row per batch count: a re-report
        after a restart replaces it). Raises the trial's ``total_batches`` to at least this."""
        self._add_metrics("training", trial_id, total_batches, metrics)

    def add_validation_metrics(self, trial_id: int, total_batches: int, metrics: Dict[str, Any]) -> None:
        """Validation metrics at ``total_batches``; same rules as ``add_training_metrics``."""
        self._add_metrics("validation", trial_id, total_batches, metrics)

    def delete_metrics_after(self, trial_id: int, total_batches: int) -> None:
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

        self._write(body)

    def _metrics(self, table: str, trial_id: int) -> List[Dict[str, Any]]:
        rows = self._read(
            lambda conn: conn.execute(
                f"SELECT total_batches, metrics FROM {table} WHERE trial_id = ? ORDER BY total_batches",
                (int(trial_id),),
            ).fetchall()
        )
        return [{"total_batches": r[0], "metrics": loads_json(r[1])} for r in rows]

    def training_metrics(self, trial_id: int) -> List[Dict[str, Any]]:
        """``[{"total_batches", "metrics"}]`` by batch."""
        return self._metrics("training_metrics", trial_id)

    def has_training_report(self, trial_id: int, total_batches: int) -> bool:
        """Whether the trial reported training metrics at ``total_batches`` (an index lookup)."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT 1 FROM training_metrics WHERE trial_id = ? AND total_batches = ? LIMIT 1",
                (int(trial_id), int(total_batches)),
            ).fetchone()
        )
        return row is not None

    def validation_metrics(self, trial_id: int) -> List[Dict[str, Any]]:
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

        return self._read(body)

    def metric_names(self, trial_ids: Sequence[int]) -> Dict[str, List[str]]:
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

        return self._read(body)

    def metric_buckets(
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
        return self._read(lambda conn: _buckets.read(conn, ids, kind, str(name), width, int(after)))

    def metric_last(self, trial_ids: Sequence[int], kind: str, name: str) -> Dict[int, Tuple[int, float]]:
        """``{trial_id: (batch, value)}``: each trial's last number reported as ``name``, exact
        (left out when the last bucket with numbers ends on a NaN, or there is none)."""
        self._check_kind(kind)
        ids = [int(t) for t in trial_ids]
        return self._read(lambda conn: _buckets.last_points(conn, ids, kind, str(name)))

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in _METRIC_TABLES:
            raise ValueError(f"metric kind must be one of {', '.join(_METRIC_TABLES)}; got {kind!r}")

    # --- checkpoints --------------------------------------------------------------------------

    def add_checkpoint(
        self,
        trial_id: int,
        uuid: str,
        path: str,
        total_batches: int,
        metrics: Optional[Dict[str, Any]] = None,
        replaces: Sequence[str] = (),
    ) -> None:
        """Register a complete checkpoint; the trial's ``latest_checkpoint`` becomes the one with
        the most batches. ``replaces``: checkpoints of the same trial forgotten in the same
        transaction (retention), so that readers never see both."""
        text = None if metrics is None else dumps_json(metrics, "checkpoint metrics")
        now = time.time()
        dropped = [str(u) for u in replaces if str(u) != str(uuid)]

        def body(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM trials WHERE id = ?", (int(trial_id),)).fetchone() is None:
                raise NotFoundError(f"trial {trial_id} not found")
            conn.execute(
                "INSERT INTO checkpoints (uuid, trial_id, path, total_batches, metrics, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (uuid) DO UPDATE SET path = excluded.path,"
                " total_batches = excluded.total_batches, metrics = excluded.metrics",
                (str(uuid), int(trial_id), str(path), int(total_batches), text, now),
            )
            conn.executemany(
                "DELETE FROM checkpoints WHERE uuid = ? AND trial_id = ?",
                [(u, int(trial_id)) for u in dropped],
            )
            self._refresh_latest(conn, int(trial_id))

        self._write(body)

    @staticmethod
    def _refresh_latest(conn: sqlite3.Connection, trial_id: int) -> None:
        conn.execute(
            "UPDATE trials SET latest_checkpoint = (SELECT uuid FROM checkpoints WHERE trial_id = ?"
            " ORDER BY total_batches DESC, created_at DESC, rowid DESC LIMIT 1) WHERE id = ?",
            (trial_id, trial_id),
        )

    def delete_checkpoint(self, uuid: str) -> Optional[str]:
        """Forget a checkpoint (e.g. garbage-collected); returns its path, or None if unknown."""

        def body(conn: sqlite3.Connection) -> Optional[str]:
            row = conn.execute(
                "SELECT trial_id, path FROM checkpoints WHERE uuid = ?", (str(uuid),)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM checkpoints WHERE uuid = ?", (str(uuid),))
            self._refresh_latest(conn, row["trial_id"])
            return row["path"]

        return self._write(body)

    def get_checkpoint(self, uuid: str) -> Optional[Dict[str, Any]]:
        """The checkpoint (``uuid, trial_id, experiment_id, path, total_batches, metrics, ...``) or None."""
        found = self._read(lambda conn: checkpoint_rows(conn, "c.uuid = ?", (str(uuid),)))
        return found[0] if found else None

    def checkpoints_by_prefix(self, prefix: str) -> List[Dict[str, Any]]:
        """Checkpoints whose uuid starts with ``prefix`` (ASCII letters in any case)."""
        escaped = str(prefix).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where = "c.uuid LIKE ? ESCAPE '\\'"
        return self._read(lambda conn: checkpoint_rows(conn, where, (escaped + "%",)))

    def list_checkpoints(
        self, experiment_id: Optional[int] = None, trial_id: Optional[int] = None
    ) -> List[Dict[str, Any]]:
        """Checkpoints by trial then batch; filtered by experiment and/or trial when given."""
        clauses, params = ["1"], []
        if experiment_id is not None:
            clauses.append("t.experiment_id = ?")
            params.append(int(experiment_id))
        if trial_id is not None:
            clauses.append("c.trial_id = ?")
            params.append(int(trial_id))
        return self._read(lambda conn: checkpoint_rows(conn, " AND ".join(clauses), tuple(params)))

    def registered_checkpoints(self, experiment_id: Optional[int] = None) -> Dict[str, str]:
        """Checkpoints the model registry names (of one experiment when given), each with what
        names it (``"model NAME version N"``): retention and garbage collection keep them and a
        delete refuses them, as Determined's master does."""

        def body(conn: sqlite3.Connection) -> Dict[str, str]:
            where, params = ("", ()) if experiment_id is None else (
                " WHERE v.checkpoint_uuid IN (SELECT c.uuid FROM checkpoints c JOIN trials t"
                " ON t.id = c.trial_id WHERE t.experiment_id = ?)",
                (int(experiment_id),),
            )
            rows = conn.execute(
                "SELECT v.checkpoint_uuid, m.name, v.version FROM model_versions v"
                f" JOIN models m ON m.id = v.model_id{where} ORDER BY m.name, v.version",
                params,
            ).fetchall()
            found: Dict[str, str] = {}
            for uuid, name, version in rows:
                found.setdefault(uuid, f"model {name!r} version {version}")
            return found

        return self._read(body)

    # --- logs ---------------------------------------------------------------------------------

    def add_logs(
        self, trial_id: Optional[int], lines: Iterable[LogLine], experiment_id: Optional[int] = None
    ) -> None:
        """Append log lines in one transaction. Each line is ``(rank or None, text)`` or a plain
        string (rank None). ``trial_id=None`` makes experiment-level lines: then pass
        ``experiment_id``. A trailing newline is dropped."""
        now = time.time()
        batch: List[Tuple[Optional[int], str]] = []
        for item in lines:
            rank, text = (None, item) if isinstance(item, str) else item
            batch.append((None if rank is None else int(rank), str(text).rstrip("\n")))
        if not batch:
            return
        if trial_id is None and experiment_id is None:
            raise ValueError("add_logs: experiment-level lines (trial_id=None) need experiment_id")

        def body(conn: sqlite3.Connection) -> None:
            if trial_id is not None:
                row = conn.execute(
                    "SELECT experiment_id FROM trials WHERE id = ?", (int(trial_id),)
                ).fetchone()
                if row is None:
                    raise NotFoundError(f"trial {trial_id} not found")
                exp_id = row[0]
            else:
                exp_id = int(experiment_id)  # type: ignore[arg-type]  # checked above
                if conn.execute("SELECT 1 FROM experiments WHERE id = ?", (exp_id,)).fetchone() is None:
                    raise NotFoundError(f"experiment {exp_id} not found")
            conn.executemany(
                "INSERT INTO logs (experiment_id, trial_id, rank, line, created_at) VALUES (?, ?, ?, ?, ?)",
                [(exp_id, trial_id, rank, text, now) for rank, text in batch],
            )

        self._write(body)

    def logs(
        self,
        experiment_id: Optional[int] = None,
        trial_id: Optional[int] = None,
        after_id: int = 0,
        tail: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        """Log lines (``id, experiment_id, trial_id, rank, line, time``) in order, with ``id > after_id``.

        ``tail=n``: only the last n of those; ``limit=n``: only the first n. Pass the last ``id``
        seen as ``after_id`` to follow.
        """
        clauses, params = ["id > ?"], [int(after_id)]
        if experiment_id is not None:
            clauses.append("experiment_id = ?")
            params.append(int(experiment_id))
        if trial_id is not None:
            clauses.append("trial_id = ?")
            params.append(int(trial_id))
        sql = (
            "SELECT id, experiment_id, trial_id, rank, line, created_at FROM logs"
            f" WHERE {' AND '.join(clauses)} ORDER BY id {'DESC' if tail is not None else 'ASC'}"
        )
        if tail is not None or limit is not None:
            sql += " LIMIT ?"
            params.append(int(tail if tail is not None else limit))  # type: ignore[arg-type]
        rows = self._read(lambda conn: conn.execute(sql, params).fetchall())
        if tail is not None:
            rows = rows[::-1]
            if limit is not None:
                rows = rows[: int(limit)]
        return [
            {
                "id": r[0],
                "experiment_id": r[1],
                "trial_id": r[2],
                "rank": r[3],
                "line": r[4],
                "time": r[5],
            }
            for r in rows
        ]
