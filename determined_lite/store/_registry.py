"""The Python SDK's records in the det-lite SQLite file: the model registry, checkpoint metadata
and experiments' labels and notes.

A model is a name (unique) with a description, labels and metadata; its versions (1, 2, ...)
each name one checkpoint by uuid. User metadata of a checkpoint is NULL until the SDK first
changes it (then readers use it instead of the checkpoint's ``metadata.json``). Rows come back
as plain dicts with JSON columns decoded.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Union

from determined_lite.store._db import Database, NotFoundError, StoreError, dumps_json, loads_json

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


class ModelRegistry(Database):
    """Models, model versions and checkpoint metadata in the store at ``path`` (default
    ``$DET_LITE_HOME/det-lite.db``). Unknown names raise ``NotFoundError`` from writers;
    getters return None."""

    # --- models -------------------------------------------------------------------------------

    def create_model(
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
            return self._model_row(conn, name)

        return self._write(body)

    @staticmethod
    def _model_row(conn: sqlite3.Connection, identifier: Union[str, int]) -> Dict[str, Any]:
        column = "m.id" if isinstance(identifier, int) else "m.name"
        row = conn.execute(f"{_MODEL_SELECT} WHERE {column} = ?", (identifier,)).fetchone()
        if row is None:
            raise NotFoundError(f"model {identifier!r} not found")
        return _model_dict(row)

    def get_model(self, identifier: Union[str, int]) -> Optional[Dict[str, Any]]:
        """The model named ``identifier`` (or with that id, for an int), or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return self._model_row(conn, identifier)
            except NotFoundError:
                return None

        return self._read(body)

    def list_models(self) -> List[Dict[str, Any]]:
        """Every model, by id."""
        rows = self._read(lambda conn: conn.execute(f"{_MODEL_SELECT} ORDER BY m.id").fetchall())
        return [_model_dict(r) for r in rows]

    def update_model(self, name: str, **fields: Any) -> Dict[str, Any]:
        """Set any of ``description, metadata, labels, archived``; returns the model."""
        clause, values = _set_clause(fields, _MODEL_FIELDS, "model")

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            self._model_row(conn, name)
            if clause:
                conn.execute(
                    f"UPDATE models SET {clause}, updated_at = ? WHERE name = ?", (*values, time.time(), name)
                )
            return self._model_row(conn, name)

        return self._write(body)

    def delete_model(self, name: str) -> None:
        """Forget a model and its versions (their checkpoints stay)."""

        def body(conn: sqlite3.Connection) -> None:
            if conn.execute("DELETE FROM models WHERE name = ?", (name,)).rowcount == 0:
                raise NotFoundError(f"model {name!r} not found")

        self._write(body)

    # --- versions -----------------------------------------------------------------------------

    def add_model_version(self, model_name: str, checkpoint_uuid: str) -> Dict[str, Any]:
        """Register a checkpoint (which must be in the store) as the model's next version."""

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            model = self._model_row(conn, model_name)
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
            return self._version_row(conn, model_name, latest + 1)

        return self._write(body)

    @staticmethod
    def _version_row(conn: sqlite3.Connection, model_name: str, version: int) -> Dict[str, Any]:
        if version == -1:
            where, params = "m.name = ? ORDER BY v.version DESC LIMIT 1", (model_name,)
        else:
            where, params = "m.name = ? AND v.version = ?", (model_name, int(version))  # type: ignore[assignment]
        row = conn.execute(f"{_VERSION_SELECT} WHERE {where}", params).fetchone()
        if row is None:
            raise NotFoundError(f"model {model_name!r} has no version {version}")
        return _version_dict(row)

    def get_model_version(self, model_name: str, version: int = -1) -> Optional[Dict[str, Any]]:
        """Version ``version`` of the model (-1: its latest), or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return self._version_row(conn, model_name, version)
            except NotFoundError:
                return None

        return self._read(body)

    def list_model_versions(self, model_name: str, descending: bool = True) -> List[Dict[str, Any]]:
        """The model's versions by version number."""
        order = "DESC" if descending else "ASC"
        rows = self._read(
            lambda conn: conn.execute(
                f"{_VERSION_SELECT} WHERE m.name = ? ORDER BY v.version {order}", (model_name,)
            ).fetchall()
        )
        return [_version_dict(r) for r in rows]

    def update_model_version(self, model_name: str, version: int, **fields: Any) -> Dict[str, Any]:
        """Set any of ``name, metadata, notes`` of a version; returns it."""
        clause, values = _set_clause(fields, _VERSION_FIELDS, "model version")

        def body(conn: sqlite3.Connection) -> Dict[str, Any]:
            found = self._version_row(conn, model_name, version)
            if clause:
                conn.execute(f"UPDATE model_versions SET {clause} WHERE id = ?", (*values, found["id"]))
            return self._version_row(conn, model_name, found["version"])

        return self._write(body)

    def delete_model_version(self, model_name: str, version: int) -> None:
        """Forget one version (its checkpoint stays); the numbers of the others do not change."""

        def body(conn: sqlite3.Connection) -> None:
            found = self._version_row(conn, model_name, version)
            conn.execute("DELETE FROM model_versions WHERE id = ?", (found["id"],))

        self._write(body)

    # --- checkpoint metadata ------------------------------------------------------------------

    def checkpoint_metadata(self, uuid: str) -> Optional[Dict[str, Any]]:
        """The checkpoint's metadata as the SDK last set it; None when never set (or unknown)."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT metadata FROM checkpoints WHERE uuid = ?", (str(uuid),)
            ).fetchone()
        )
        return None if row is None else loads_json(row[0])

    def set_checkpoint_metadata(self, uuid: str, metadata: Dict[str, Any]) -> None:
        """Replace the checkpoint's metadata (in the store; its ``metadata.json`` is left as written)."""
        text = dumps_json(metadata, "checkpoint metadata")

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute("UPDATE checkpoints SET metadata = ? WHERE uuid = ?", (text, str(uuid)))
            if cursor.rowcount == 0:
                raise NotFoundError(f"checkpoint {uuid} not found")

        self._write(body)

    # --- experiment labels and notes ----------------------------------------------------------

    def experiment_annotations(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """``{"labels": [...], "notes": str}`` of the experiment, or None when unknown."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT labels, notes FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        return None if row is None else {"labels": loads_json(row[0]) or [], "notes": row[1]}

    def set_experiment_annotations(
        self,
        experiment_id: int,
        *,
        labels: Optional[List[str]] = None,
        notes: Optional[str] = None,
        name: Optional[str] = None,
        description: Optional[str] = None,
    ) -> None:
        """Replace the experiment's labels (kept sorted, once each), notes, name and/or
        description. The name and the description are also written into the stored config
        (``name``, ``description``), as Determined's master patches them there."""
        fields: Dict[str, Any] = {}
        if labels is not None:
            fields["labels"] = dumps_json(sorted(set(labels)), "experiment labels")
        if notes is not None:
            fields["notes"] = str(notes)
        if name is not None:
            fields["name"] = str(name)
        patch = {k: str(v) for k, v in (("name", name), ("description", description)) if v is not None}

        def body(conn: sqlite3.Connection) -> None:
            query = "SELECT config FROM experiments WHERE id = ?"
            row = conn.execute(query, (int(experiment_id),)).fetchone()
            if row is None:
                raise NotFoundError(f"experiment {experiment_id} not found")
            if patch:
                fields["config"] = dumps_json({**(loads_json(row[0]) or {}), **patch}, "experiment config")
            assignments = ", ".join(f"{k} = ?" for k in fields) or "id = id"
            conn.execute(
                f"UPDATE experiments SET {assignments} WHERE id = ?", (*fields.values(), int(experiment_id))
            )

        self._write(body)
