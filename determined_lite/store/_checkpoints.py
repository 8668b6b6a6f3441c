"""The ``checkpoints`` table: a trial's complete checkpoints, the metadata the SDK sets on them,
and which of them the model registry names."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from determined_lite.store._db import NotFoundError, Repository, dumps_json, loads_json


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


def _refresh_latest(conn: sqlite3.Connection, trial_id: int) -> None:
    conn.execute(
        "UPDATE trials SET latest_checkpoint = (SELECT uuid FROM checkpoints WHERE trial_id = ?"
        " ORDER BY total_batches DESC, created_at DESC, rowid DESC LIMIT 1) WHERE id = ?",
        (trial_id, trial_id),
    )


class Checkpoints(Repository):
    """Checkpoints (``store.checkpoints``): getters return None for an unknown uuid."""

    def add(
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
            _refresh_latest(conn, int(trial_id))

        self.db.write(body)

    def delete(self, uuid: str) -> Optional[str]:
        """Forget a checkpoint (e.g. garbage-collected); returns its path, or None if unknown."""

        def body(conn: sqlite3.Connection) -> Optional[str]:
            row = conn.execute(
                "SELECT trial_id, path FROM checkpoints WHERE uuid = ?", (str(uuid),)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM checkpoints WHERE uuid = ?", (str(uuid),))
            _refresh_latest(conn, row["trial_id"])
            return row["path"]

        return self.db.write(body)

    def get(self, uuid: str) -> Optional[Dict[str, Any]]:
        """The checkpoint (``uuid, trial_id, experiment_id, path, total_batches, metrics, ...``) or None."""
        found = self.db.read(lambda conn: checkpoint_rows(conn, "c.uuid = ?", (str(uuid),)))
        return found[0] if found else None

    def by_prefix(self, prefix: str) -> List[Dict[str, Any]]:
        """Checkpoints whose uuid starts with ``prefix`` (ASCII letters in any case)."""
        escaped = str(prefix).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where = "c.uuid LIKE ? ESCAPE '\\'"
        return self.db.read(lambda conn: checkpoint_rows(conn, where, (escaped + "%",)))

    def list(
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
        return self.db.read(lambda conn: checkpoint_rows(conn, " AND ".join(clauses), tuple(params)))

    def registered(self, experiment_id: Optional[int] = None) -> Dict[str, str]:
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

        return self.db.read(body)

    def metadata(self, uuid: str) -> Optional[Dict[str, Any]]:
        """The checkpoint's user metadata as the SDK last set it; None when never set (or
        unknown): then readers use the checkpoint's ``metadata.json``."""
        row = self.db.read(
            lambda conn: conn.execute(
                "SELECT metadata FROM checkpoints WHERE uuid = ?", (str(uuid),)
            ).fetchone()
        )
        return None if row is None else loads_json(row[0])

    def set_metadata(self, uuid: str, metadata: Dict[str, Any]) -> None:
        """Replace the checkpoint's metadata (in the store; its ``metadata.json`` is left as written)."""
        text = dumps_json(metadata, "checkpoint metadata")

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute("UPDATE checkpoints SET metadata = ? WHERE uuid = ?", (text, str(uuid)))
            if cursor.rowcount == 0:
                raise NotFoundError(f"checkpoint {uuid} not found")

        self.db.write(body)
