"""The ``logs`` table: the lines of an experiment's runner and of its trials' workers, in order."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from determined_lite.store._db import NotFoundError, Repository

LogLine = Union[str, Tuple[Optional[int], str]]


class Logs(Repository):
    """Log lines (``store.logs``)."""

    def add(
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

        self.db.write(body)

    def list(
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
        rows = self.db.read(lambda conn: conn.execute(sql, params).fetchall())
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
