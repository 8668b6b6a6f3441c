"""The model registry (``models`` and ``model_versions``) in the det-lite SQLite file.

A model is a name (unique) with a description, labels and metadata; its versions (1, 2, ...)
each name one checkpoint by uuid. Rows come back as plain dicts with JSON columns decoded.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Union

from determined_lite.store._db import NotFoundError, Repository, StoreError, dumps_json, loads_json

_MODEL_FIELDS = ("description", "metadata", "labels", "archived")
_VERSION_FIELDS = ("name", "metadata", "notes")
_JSON_FIELDS = ("metadata", "labels")


def _model_dict(row: sqlite3.Row) -> Dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "metadata": loads_json(row["metadata"]),
        "labels": loads_json(row["labels"]),
        "archived": bool(row["archived"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "num_versions": row["num_versions"],
    }


def _version_dict(row: sqlite3.Row) -> Dict[str, Any]:
    return {
        "id": row["id"],
        "model_id": row["model_id"],
        "model_name": row["model_name"],
        "version": row["version"],
        "checkpoint_uuid": row["checkpoint_uuid"],
        "name": row["name"],
        "metadata": loads_json(row["metadata"]),
        "notes": row["notes"],
        "created_at": row["created_at"],
    }


_MODEL_SELECT = (
    "SELECT m.*, (SELECT COUNT(*) FROM model_versions v WHERE v.model_id = m.id) AS num_versions"
    " FROM models m"
)
_VERSION_SELECT = "SELECT v.*, m.name AS model_name FROM model_versions v JOIN models m ON m.id = v.model_id"


def _set_clause(fields: Dict[str, Any], allowed: tuple, what: str) -> tuple:
    """``"a = ?, b = ?"`` and its values for an update of ``fields`` (JSON columns encoded)."""
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ValueError(f"cannot update {what} field(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    values = [dumps_json(v, f"{what} {k}") if k in _JSON_FIELDS else v for k, v in fields.items()]
    return ", ".join(f"{k} = ?" for k in fields), values


def _model_row(conn: sqlite3.Connection, identifier: Union[str, int]) -> Dict[str, Any]:
    column = "m.id" if isinstance(identifier, int) else "m.name"
    row = conn.execute(f"{_MODEL_SELECT} WHERE {column} = ?", (identifier,)).fetchone()
    if row is None:
        raise NotFoundError(f"model {identifier!r} not found")
    return _model_dict(row)


def _version_row(conn: sqlite3.Connection, model_name: str, version: int) -> Dict[str, Any]:
    if version == -1:
        where, params = "m.name = ? ORDER BY v.version DESC LIMIT 1", (model_name,)
    else:
        where, params = "m.name = ? AND v.version = ?", (model_name, int(version))  # type: ignore[assignment]
    row = conn.execute(f"{_VERSION_SELECT} WHERE {where}", params).fetchone()
    if row is None:
        raise NotFoundError(f"model {model_name!r} has no version {version}")
    return _version_dict(row)


class Models(Repository):
    """Models and their versions (``store.models``). Unknown names raise ``NotFoundError`` from
    writers; getters return None."""

    def create(
        self,
        name: str,
        description: str = "",
        metadata: Optional[Dict[str, Any]] = None,
        labels: Optional[List[str]] = None,
    ) -> Dict[str, Any]:
        """Record a new model; ``StoreError`` when the name is taken."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a model needs a non-empty name; got {name!r}")
        text = dumps_json(metadata or {}, "model metadata")
        labels_text = dumps_json(list(labels or []), "model labels")
        now = time.time()

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            if conn.execute("SELECT 1 FROM models WHERE name = ?", (name,)).fetchone() is not None:
                raise StoreError(f"a model named {name!r} already exists")
            conn.execute(
                "INSERT INTO models (name, description, metadata, labels, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, description or "", text, labels_text, now, now),
            )
            return _model_row(conn, name)

        return self.db.write(body)

    def get(self, identifier: Union[str, int]) -> Optional[Dict[str, Any]]:
        """The model named ``identifier`` (or with that id, for an int), or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return _model_row(conn, identifier)
            except NotFoundError:
                return None

        return self.db.read(body)

    def list(self) -> List[Dict[str, Any]]:
        """Every model, by id."""
        rows = self.db.read(lambda conn: conn.execute(f"{_MODEL_SELECT} ORDER BY m.id").fetchall())
        return [_model_dict(r) for r in rows]

    def update(self, name: str, **fields: Any) -> Dict[str, Any]:
        """Set any of ``description, metadata, labels, archived``; returns the model."""
        clause, values = _set_clause(fields, _MODEL_FIELDS, "model")

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            _model_row(conn, name)
            if clause:
                conn.execute(
                    f"UPDATE models SET {clause}, updated_at = ? WHERE name = ?", (*values, time.time(), name)
                )
            return _model_row(conn, name)

        return self.db.write(body)

    def delete(self, name: str) -> None:
        """Forget a model and its versions (their checkpoints stay)."""

        def body(conn: sqlite3.Connection) -> None:
            if conn.execute("DELETE FROM models WHERE name = ?", (name,)).rowcount == 0:
                raise NotFoundError(f"model {name!r} not found")

        self.db.write(body)

    def add_version(self, model_name: str, checkpoint_uuid: str) -> Dict[str, Any]:
        """Register a checkpoint (which must be in the store) as the model's next version."""

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            model = _model_row(conn, model_name)
            if (
                conn.execute("SELECT 1 FROM checkpoints WHERE uuid = ?", (str(checkpoint_uuid),)).fetchone()
                is None
            ):
                raise NotFoundError(f"checkpoint {checkpoint_uuid} not found")
            latest = conn.execute(
                "SELECT COALESCE(MAX(version), 0) FROM model_versions WHERE model_id = ?", (model["id"],)
            ).fetchone()[0]
            now = time.time()
            conn.execute(
                "INSERT INTO model_versions (model_id, version, checkpoint_uuid, created_at)"
                " VALUES (?, ?, ?, ?)",
                (model["id"], latest + 1, str(checkpoint_uuid), now),
            )
            conn.execute("UPDATE models SET updated_at = ? WHERE id = ?", (now, model["id"]))
            return _version_row(conn, model_name, latest + 1)

        return self.db.write(body)

    def get_version(self, model_name: str, version: int = -1) -> Optional[Dict[str, Any]]:
        """Version ``version`` of the model (-1: its latest), or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return _version_row(conn, model_name, version)
            except NotFoundError:
                return None

        return self.db.read(body)

    def list_versions(self, model_name: str, descending: bool = True) -> List[Dict[str, Any]]:
        """The model's versions by version number."""
        order = "DESC" if descending else "ASC"
        rows = self.db.read(
            lambda conn: conn.execute(
                f"{_VERSION_SELECT} WHERE m.name = ? ORDER BY v.version {order}", (model_name,)
            ).fetchall()
        )
        return [_version_dict(r) for r in rows]

    def update_version(self, model_name: str, version: int, **fields: Any) -> Dict[str, Any]:
        """Set any of ``name, metadata, notes`` of a version; returns it."""
        clause, values = _set_clause(fields, _VERSION_FIELDS, "model version")

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            found = _version_row(conn, model_name, version)
            if clause:
                conn.execute(f"UPDATE model_versions SET {clause} WHERE id = ?", (*values, found["id"]))
            return _version_row(conn, model_name, found["version"])

        return self.db.write(body)

    def delete_version(self, model_name: str, version: int) -> None:
        """Forget one version (its checkpoint stays); the numbers of the others do not change."""

        def body(conn: sqlite3.Connection) -> None:
            found = _version_row(conn, model_name, version)
            conn.execute("DELETE FROM model_versions WHERE id = ?", (found["id"],))

        self.db.write(body)
