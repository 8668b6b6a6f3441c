"""The ``experiments`` table: an experiment's row, state, process, searcher state, labels and
notes, and ``describe`` (the experiment with its trials' records, in one snapshot).

Rows come back as plain dicts with JSON columns decoded.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Tuple

from determined_lite.store._checkpoints import checkpoint_rows
from determined_lite.store._db import NotFoundError, Repository, StoreError, dumps_json, loads_json
from determined_lite.store._paths import lock_held, process_alive, process_token, runner_lock_path
from determined_lite.store._states import (
    TERMINAL_STATES,
    ExperimentKind,
    ExperimentState,
    TrialState,
    check_member,
)
from determined_lite.store._trials import TRIAL_COLUMNS, describe_trials

EXPERIMENT_COLUMNS = (
    "id, name, kind, state, context_dir, config_path, pid, pid_token, requested_action, created_at, ended_at"
)


def experiment_row(conn: sqlite3.Connection, experiment_id: int) -> sqlite3.Row:
    """The experiment's row (with its config); ``NotFoundError`` when unknown."""
    row = conn.execute(
        f"SELECT {EXPERIMENT_COLUMNS}, config FROM experiments WHERE id = ?", (int(experiment_id),)
    ).fetchone()
    if row is None:
        raise NotFoundError(f"experiment {experiment_id} not found")
    return row


def _experiment_dict(row: sqlite3.Row, config: bool = True) -> Dict[str, Any]:
    exp = {
        "id": row["id"],
        "name": row["name"],
        "kind": row["kind"],
        "state": row["state"],
        "context_dir": row["context_dir"],
        "config_path": row["config_path"],
        "pid": row["pid"],
        "requested_action": row["requested_action"],
        "created_at": row["created_at"],
        "ended_at": row["ended_at"],
        "running": bool(row["pid"]) and process_alive(row["pid"], row["pid_token"]),
    }
    if config:
        exp["config"] = loads_json(row["config"])
    if "num_trials" in row.keys():
        exp["num_trials"] = row["num_trials"]
    return exp


def stop_experiment(conn: sqlite3.Connection, experiment_id: int, state: ExperimentState) -> None:
    """End or pause the experiment's row with no process behind it (its pid and pending
    request cleared) and its unfinished trials with it (PAUSED: the ACTIVE ones)."""
    now = time.time()
    ended = now if state in TERMINAL_STATES else None
    conn.execute(
        "UPDATE experiments SET state = ?, ended_at = ?, requested_action = NULL, pid = NULL,"
        " pid_token = NULL WHERE id = ?",
        (state, ended, experiment_id),
    )
    if state == ExperimentState.PAUSED:
        unfinished: Tuple[TrialState, ...] = (TrialState.ACTIVE,)
    else:
        unfinished = (TrialState.ACTIVE, TrialState.PAUSED)
    conn.execute(
        f"UPDATE trials SET state = ?, ended_at = ? WHERE experiment_id = ?"
        f" AND state IN ({','.join('?' * len(unfinished))})",
        (TrialState(state), ended, experiment_id, *unfinished),
    )


class Experiments(Repository):
    """Experiments (``store.experiments``). Unknown ids raise ``NotFoundError`` from writers;
    getters return None."""

    def create(
        self,
        config: Dict[str, Any],
        context_dir: Optional[str],
        config_path: Optional[str],
        name: Optional[str] = None,
        state: str = ExperimentState.ACTIVE,
        pid: Optional[int] = None,
        kind: str = ExperimentKind.EXPERIMENT,
    ) -> int:
        """Record a new experiment (default state ACTIVE); returns its id (1, 2, ...).

        ``pid``: the process that will run it, recorded at once (as ``set_pid``); ``kind``:
        ``ExperimentKind`` (``local`` for a plain-Python ``Trainer.fit``, ``unmanaged`` for a
        Core API script's ``core_v2.init()``)."""
        state = check_member(state, ExperimentState, "experiment state")
        kind = check_member(kind, ExperimentKind, "experiment kind")
        token = process_token(pid) if pid else None
        if name is None and isinstance(config, dict) and isinstance(config.get("name"), str):
            name = config["name"]
        config_text = dumps_json(config, "experiment config")
        now = time.time()
        ended = now if state in TERMINAL_STATES else None

        def body(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO experiments (name, kind, state, config, context_dir, config_path, created_at,"
                " ended_at, pid, pid_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, kind, state, config_text, context_dir, config_path, now, ended, pid, token),
            )
            assert cursor.lastrowid is not None  # set by every INSERT
            return int(cursor.lastrowid)

        return self.db.write(body)

    def get(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """The experiment as a dict (``id, name, kind, state, config, context_dir, config_path, pid,
        requested_action, created_at, ended_at, running``), or None. ``running``: the process
        recorded with ``set_pid`` is alive."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return _experiment_dict(experiment_row(conn, experiment_id))
            except NotFoundError:
                return None

        exp = self.db.read(body)
        return None if exp is None else self.reconcile_runner(exp)

    def list(self, limit: Optional[int] = None, with_config: bool = True) -> List[Dict[str, Any]]:
        """Experiments by id, ascending, each with ``num_trials``; ``limit`` keeps the newest ``limit``."""
        columns = ", ".join(f"e.{c.strip()}" for c in EXPERIMENT_COLUMNS.split(","))
        if with_config:
            columns += ", e.config"
        sql = (
            f"SELECT {columns}, (SELECT COUNT(*) FROM trials t WHERE t.experiment_id = e.id) AS num_trials"
            " FROM experiments e ORDER BY e.id DESC"
        )
        params: Tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        rows = self.db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [self.reconcile_runner(_experiment_dict(r, config=with_config)) for r in reversed(rows)]

    def reconcile_runner(self, exp: Dict[str, Any]) -> Dict[str, Any]:
        """``exp`` (a read experiment) as it stands once a gone runner is accounted for: ACTIVE
        with its recorded process dead and its runner lock free (the trials' processes gone
        too: SIGKILL, a closed terminal before the runner could pause, a crash) becomes PAUSED
        with its unfinished trials, so `activate` resumes it and nothing reads ACTIVE with no
        process behind it. Through a read-only store, or when the write fails (a full disk), it
        stays as read (``ACTIVE (not running)``)."""
        if exp["state"] != ExperimentState.ACTIVE or exp["running"] or not exp["pid"] or self.db.read_only:
            return exp
        if lock_held(runner_lock_path(exp["id"])):  # its trials' processes still exiting
            return exp

        def body(conn: sqlite3.Connection) -> bool:
            row = experiment_row(conn, exp["id"])
            if row["state"] != ExperimentState.ACTIVE or row["pid"] != exp["pid"]:
                return False  # another process changed it meanwhile
            stop_experiment(conn, exp["id"], ExperimentState.PAUSED)
            return True

        try:
            paused = self.db.write(body)
        except (StoreError, sqlite3.Error):
            return exp
        if paused:
            exp.update(state=ExperimentState.PAUSED.value, pid=None, requested_action=None, running=False)
        return exp

    def count(self) -> int:
        """How many experiments the store holds."""
        return self.db.read(lambda conn: conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0])

    def set_state(self, experiment_id: int, state: str) -> None:
        """Set the state; a terminal state stamps ``ended_at``. Leaving ACTIVE drops a pending action."""
        state = check_member(state, ExperimentState, "experiment state")
        ended = time.time() if state in TERMINAL_STATES else None

        def body(conn: sqlite3.Connection) -> None:
            experiment_row(conn, experiment_id)
            if state == ExperimentState.ACTIVE:
                conn.execute(
                    "UPDATE experiments SET state = ?, ended_at = NULL WHERE id = ?", (state, experiment_id)
                )
            else:
                conn.execute(
                    "UPDATE experiments SET state = ?, ended_at = COALESCE(?, ended_at),"
                    " requested_action = NULL WHERE id = ?",
                    (state, ended, experiment_id),
                )

        self.db.write(body)

    def set_pid(self, experiment_id: int, pid: Optional[int]) -> None:
        """Record the process running the experiment (None when it exits)."""
        token = process_token(pid) if pid else None

        def body(conn: sqlite3.Connection) -> None:
            experiment_row(conn, experiment_id)
            conn.execute(
                "UPDATE experiments SET pid = ?, pid_token = ? WHERE id = ?", (pid, token, experiment_id)
            )

        self.db.write(body)

    def set_running(self, experiment_id: int, pid: int) -> None:
        """Record in one write that process ``pid`` runs the experiment and that it is ACTIVE:
        a ``pause`` from then on is a request that process honours, never "already PAUSED"
        (nor a state change behind the back of a runner that has not recorded itself yet)."""
        token = process_token(pid)

        def body(conn: sqlite3.Connection) -> None:
            experiment_row(conn, experiment_id)
            conn.execute(
                "UPDATE experiments SET state = ?, ended_at = NULL, pid = ?, pid_token = ? WHERE id = ?",
                (ExperimentState.ACTIVE, pid, token, experiment_id),
            )

        self.db.write(body)

    def process_alive(self, experiment_id: int) -> bool:
        """Whether the process recorded with ``set_pid`` still runs (pid reuse detected)."""
        row = self.db.read(lambda conn: experiment_row(conn, experiment_id))
        return process_alive(row["pid"], row["pid_token"])

    def save_searcher_state(self, experiment_id: int, state: Dict[str, Any]) -> None:
        """Store the searcher's state (JSON), replacing the previous one."""
        text = dumps_json(state, "searcher state")

        def body(conn: sqlite3.Connection) -> None:
            experiment_row(conn, experiment_id)
            conn.execute("UPDATE experiments SET searcher_state = ? WHERE id = ?", (text, experiment_id))

        self.db.write(body)

    def load_searcher_state(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """The last saved searcher state, or None."""
        row = self.db.read(
            lambda conn: conn.execute(
                "SELECT searcher_state FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        if row is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        return loads_json(row[0])

    def delete(self, experiment_id: int) -> List[Dict[str, Any]]:
        """Delete the experiment's rows (trials, metrics, checkpoints, logs).

        Returns its checkpoints (``uuid``, ``path``, ...) so the caller can remove the files;
        the store never touches files.
        """

        def body(conn: sqlite3.Connection) -> List[Dict[str, Any]]:
            experiment_row(conn, experiment_id)
            checkpoints = checkpoint_rows(conn, "t.experiment_id = ?", (experiment_id,))
            trial_ids = "(SELECT id FROM trials WHERE experiment_id = ?)"
            conn.execute("DELETE FROM logs WHERE experiment_id = ?", (experiment_id,))
            for table in ("training_metrics", "validation_metrics", "checkpoints", "trial_runs"):
                conn.execute(f"DELETE FROM {table} WHERE trial_id IN {trial_ids}", (experiment_id,))
            conn.execute("DELETE FROM trials WHERE experiment_id = ?", (experiment_id,))
            conn.execute("DELETE FROM experiments WHERE id = ?", (experiment_id,))
            return checkpoints

        return self.db.write(body)

    def describe(self, experiment_id: int, metrics: bool = True) -> Optional[Dict[str, Any]]:
        """The experiment, its trials and their records, or None.

        ``{"id", "state", "config", "labels", "notes", "trials": [{"id", "state", "hparams", "seed",
        "total_batches", "restarts", "training_metrics": [{"total_batches", "metrics"}],
        "validation_metrics": [...], "checkpoints": [{"uuid", "path", "total_batches",
        "metrics"}], "best_validation"}]}`` plus ``name``, ``context_dir``, ``config_path``,
        ``pid``, ``running``, ``requested_action``, ``created_at``, ``ended_at``; trials also carry
        ``experiment_id``, ``request_id``, ``latest_checkpoint``, ``created_at``, ``started_at``
        (None until it first runs), ``ended_at``, ``stopped_early`` and ``runs`` (where each run
        was placed, oldest first: ``{"started_at", "executor", "host", "slots", "devices"}``).
        ``metrics=False``: trials without ``training_metrics`` and ``validation_metrics`` (what
        grows with training; ``store.metrics.workloads`` reads them a trial at a time). Read in
        one snapshot.
        """

        if self.get(experiment_id) is None:  # (a gone runner accounted for first)
            return None

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                exp = _experiment_dict(experiment_row(conn, experiment_id))
            except NotFoundError:
                return None
            labels, notes = conn.execute(
                "SELECT labels, notes FROM experiments WHERE id = ?", (experiment_id,)
            ).fetchone()
            exp.update(labels=loads_json(labels), notes=notes)
            trials = conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? ORDER BY id", (experiment_id,)
            ).fetchall()
            exp["trials"] = describe_trials(conn, trials, "t.experiment_id = ?", (experiment_id,), metrics)
            return exp

        return self.db.read(body)

    def annotations(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """``{"labels": [...], "notes": str}`` of the experiment, or None when unknown."""
        row = self.db.read(
            lambda conn: conn.execute(
                "SELECT labels, notes FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        return None if row is None else {"labels": loads_json(row[0]) or [], "notes": row[1]}

    def set_annotations(
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
            config = experiment_row(conn, experiment_id)["config"]  # NotFoundError when unknown
            if patch:
                fields["config"] = dumps_json({**(loads_json(config) or {}), **patch}, "experiment config")
            assignments = ", ".join(f"{k} = ?" for k in fields) or "id = id"
            conn.execute(
                f"UPDATE experiments SET {assignments} WHERE id = ?", (*fields.values(), int(experiment_id))
            )

        self.db.write(body)
