"""The store's SQLite schema as an ordered list of forward migrations, tracked in ``PRAGMA user_version``.

Migration ``n`` (1-based) brings a database at version ``n - 1`` to version ``n``. A database is
upgraded in one write transaction, so a process killed mid-upgrade leaves the old version intact.
Never edit a released migration: append a new one.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, List

from determined_lite.store import _buckets

Migration = Callable[[sqlite3.Connection], None]


def _v1(conn: sqlite3.Connection) -> None:
    """Experiments, trials, metrics, checkpoints and logs."""
    for statement in _V1_STATEMENTS:
        conn.execute(statement)


# Training and validation metrics: one table each, of the same columns.
_METRICS_TABLE = """CREATE TABLE {table} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
        total_batches INTEGER NOT NULL,
        metrics TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (trial_id, total_batches)
    )"""

# ``request_id`` is declared without a type so it keeps what the searcher gave (int or str).
_V1_STATEMENTS = [
    """CREATE TABLE experiments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT,
        state TEXT NOT NULL,
        config TEXT NOT NULL,
        context_dir TEXT,
        config_path TEXT,
        searcher_state TEXT,
        pid INTEGER,
        pid_token TEXT,
        requested_action TEXT,
        created_at REAL NOT NULL,
        ended_at REAL
    )""",
    """CREATE TABLE trials (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        request_id,
        state TEXT NOT NULL,
        hparams TEXT NOT NULL,
        seed INTEGER,
        total_batches INTEGER NOT NULL DEFAULT 0,
        restarts INTEGER NOT NULL DEFAULT 0,
        best_validation REAL,
        latest_checkpoint TEXT,
        created_at REAL NOT NULL,
        ended_at REAL
    )""",
    "CREATE INDEX trials_by_experiment ON trials(experiment_id, request_id)",
    _METRICS_TABLE.format(table="training_metrics"),
    _METRICS_TABLE.format(table="validation_metrics"),
    """CREATE TABLE checkpoints (
        uuid TEXT PRIMARY KEY,
        trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        total_batches INTEGER NOT NULL,
        metrics TEXT,
        state TEXT NOT NULL DEFAULT 'COMPLETED',
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX checkpoints_by_trial ON checkpoints(trial_id, total_batches)",
    """CREATE TABLE logs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
        trial_id INTEGER REFERENCES trials(id) ON DELETE CASCADE,
        rank INTEGER,
        line TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX logs_by_experiment ON logs(experiment_id, id)",
    "CREATE INDEX logs_by_trial ON logs(trial_id, id)",
]


def _v2(conn: sqlite3.Connection) -> None:
    """``experiments.kind``: ``experiment`` (the CLI's) or ``local`` (a ``Trainer.fit`` from Python)."""
    conn.execute("ALTER TABLE experiments ADD COLUMN kind TEXT NOT NULL DEFAULT 'experiment'")


def _v3(conn: sqlite3.Connection) -> None:
    """The Python SDK's records: user metadata on checkpoints (NULL: the ``metadata.json`` the
    checkpoint was written with) and the model registry (``models``, ``model_versions``)."""
    for statement in _V3_STATEMENTS:
        conn.execute(statement)


# A model version names its checkpoint by uuid without a foreign key: deleting a checkpoint
# (retention, ``experiment delete``) never fails because it is registered.
_V3_STATEMENTS = [
    "ALTER TABLE checkpoints ADD COLUMN metadata TEXT",
    """CREATE TABLE models (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        labels TEXT NOT NULL DEFAULT '[]',
        archived INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE model_versions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        checkpoint_uuid TEXT NOT NULL,
        name TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        notes TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        UNIQUE (model_id, version)
    )""",
]


def _v4(conn: sqlite3.Connection) -> None:
    """``metric_buckets``: the down-sampled curves the metric write path keeps (``_buckets.py``),
    filled from the metric rows already stored."""
    for statement in _buckets.TABLE_STATEMENTS:
        conn.execute(statement)
    _buckets.rebuild_series(conn)


def _v5(conn: sqlite3.Connection) -> None:
    """``trials.stopped_early`` (the searcher closed the trial before its full length: ASHA) and
    ``trials.started_at`` (when the trial first ran; ``created_at`` is when the searcher asked
    for it, which for a search is the experiment's start). Trials recorded before: their
    ``created_at``, all that is known."""
    conn.execute("ALTER TABLE trials ADD COLUMN stopped_early INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE trials ADD COLUMN started_at REAL")
    conn.execute("UPDATE trials SET started_at = created_at WHERE state != 'ACTIVE' OR total_batches > 0")


def _v6(conn: sqlite3.Connection) -> None:
    """``trial_runs``: where each run of a trial was placed (its executor, host, slots and the
    GPU ids it held, a JSON list, empty on CPU slots). Runs before this version: none known."""
    conn.execute(
        """CREATE TABLE trial_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
        started_at REAL NOT NULL,
        executor TEXT NOT NULL,
        host TEXT NOT NULL,
        slots INTEGER NOT NULL,
        devices TEXT NOT NULL
    )"""
    )
    conn.execute("CREATE INDEX trial_runs_trial ON trial_runs (trial_id)")


def _v7(conn: sqlite3.Connection) -> None:
    """The SDK's experiment annotations (Determined's ``Experiment.add_label`` / ``set_notes``):
    ``experiments.labels`` (a JSON list) and ``experiments.notes``."""
    conn.execute("ALTER TABLE experiments ADD COLUMN labels TEXT NOT NULL DEFAULT '[]'")
    conn.execute("ALTER TABLE experiments ADD COLUMN notes TEXT NOT NULL DEFAULT ''")


def _v8(conn: sqlite3.Connection) -> None:
    """``trials.kill_requested``: the SDK's ``Trial.kill()`` asked the runner to end this trial
    alone (CANCELED), the search going on."""
    conn.execute("ALTER TABLE trials ADD COLUMN kill_requested INTEGER NOT NULL DEFAULT 0")


def _v9(conn: sqlite3.Connection) -> None:
    """``trials.own_length``: the batches a script's ``Trainer.fit(max_length=...)`` trains to
    when the searcher sets no length (Determined >= 0.38), as its chief reported it; NULL: not
    known (the searcher's length applies, or the script has not reached ``fit`` yet)."""
    conn.execute("ALTER TABLE trials ADD COLUMN own_length INTEGER")


MIGRATIONS: List[Migration] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9]
