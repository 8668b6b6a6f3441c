"""Store: experiments and trials in the det-lite SQLite file (metrics, checkpoints and logs are
``TrialRecords``, in ``_records.py``; pause/kill requests are ``ExperimentRequests``, in
``_actions.py``).

Rows come back as plain dicts with JSON columns decoded. ``best_validation`` is a REAL column,
where SQLite turns NaN into NULL (``None``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from determined_lite.store._actions import EXPERIMENT_COLUMNS, ExperimentRequests, check_member
from determined_lite.store._db import NotFoundError, dumps_json, loads_json
from determined_lite.store._paths import process_alive, process_token
from determined_lite.store._records import checkpoint_rows
from determined_lite.store._states import (
    TERMINAL_STATES,
    ExperimentKind,
    ExperimentState,
    TrialState,
)

_TRIAL_FIELDS = (
    "state",
    "total_batches",
    "restarts",
    "best_validation",
    "latest_checkpoint",
    "stopped_early",
    "started_at",
)
_TRIAL_COLUMNS = (
    "id, experiment_id, request_id, state, hparams, seed, total_batches, restarts, best_validation,"
    " latest_checkpoint, created_at, ended_at, stopped_early, started_at"
)


class Store(ExperimentRequests):
    """The experiment store at ``path`` (default ``$DET_LITE_HOME/det-lite.db``).

    Safe to use from several threads and processes; ``timeout`` bounds how long a write waits
    for the lock before raising ``StoreError``. Unknown ids raise ``NotFoundError`` (a
    ``StoreError`` and a ``KeyError``) from writers; getters return None.
    """

    # --- experiments --------------------------------------------------------------------------

    def create_experiment(
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

        ``pid``: the process that will run it, recorded at once (as ``set_experiment_pid``);
        ``kind``: ``ExperimentKind`` (``local`` for a plain-Python ``Trainer.fit``, ``unmanaged``
        for a Core API script's ``core_v2.init()``)."""
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

        return self._write(body)

    @staticmethod
    def _experiment_dict(row: sqlite3.Row, config: bool = True) -> Dict[str, Any]:
        keys = row.keys()
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
        if "num_trials" in keys:
            exp["num_trials"] = row["num_trials"]
        return exp

    def get_experiment(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """The experiment as a dict (``id, name, kind, state, config, context_dir, config_path, pid,
        requested_action, created_at, ended_at, running``), or None. ``running``: the process
        recorded with ``set_experiment_pid`` is alive."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                return self._experiment_dict(self._experiment_row(conn, experiment_id))
            except NotFoundError:
                return None

        exp = self._read(body)
        return None if exp is None else self.reconcile_runner(exp)

    def list_experiments(self, limit: Optional[int] = None, with_config: bool = True) -> List[Dict[str, Any]]:
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
        rows = self._read(lambda conn: conn.execute(sql, params).fetchall())
        return [self.reconcile_runner(self._experiment_dict(r, config=with_config)) for r in reversed(rows)]

    def count_experiments(self) -> int:
        """How many experiments the store holds."""
        return self._read(lambda conn: conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0])

    def set_experiment_state(self, experiment_id: int, state: str) -> None:
        """Set the state; a terminal state stamps ``ended_at``. Leaving ACTIVE drops a pending action."""
        state = check_member(state, ExperimentState, "experiment state")
        ended = time.time() if state in TERMINAL_STATES else None

        def body(conn: sqlite3.Connection) -> None:
            self._experiment_row(conn, experiment_id)
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

        self._write(body)

    def set_experiment_pid(self, experiment_id: int, pid: Optional[int]) -> None:
        """Record the process running the experiment (None when it exits)."""
        token = process_token(pid) if pid else None

        def body(conn: sqlite3.Connection) -> None:
            self._experiment_row(conn, experiment_id)
            conn.execute(
                "UPDATE experiments SET pid = ?, pid_token = ? WHERE id = ?", (pid, token, experiment_id)
            )

        self._write(body)

    def set_experiment_running(self, experiment_id: int, pid: int) -> None:
        """Record in one write that process ``pid`` runs the experiment and that it is ACTIVE:
        a ``pause`` from then on is a request that process honours, never "already PAUSED"
        (nor a state change behind the back of a runner that has not recorded itself yet)."""
        token = process_token(pid)

        def body(conn: sqlite3.Connection) -> None:
            self._experiment_row(conn, experiment_id)
            conn.execute(
                "UPDATE experiments SET state = ?, ended_at = NULL, pid = ?, pid_token = ? WHERE id = ?",
                (ExperimentState.ACTIVE, pid, token, experiment_id),
            )

        self._write(body)

    def experiment_process_alive(self, experiment_id: int) -> bool:
        """Whether the process recorded with ``set_experiment_pid`` still runs (pid reuse detected)."""
        row = self._read(lambda conn: self._experiment_row(conn, experiment_id))
        return process_alive(row["pid"], row["pid_token"])

    def save_searcher_state(self, experiment_id: int, state: Dict[str, Any]) -> None:
        """Store the searcher's state (JSON), replacing the previous one."""
        text = dumps_json(state, "searcher state")

        def body(conn: sqlite3.Connection) -> None:
            self._experiment_row(conn, experiment_id)
            conn.execute("UPDATE experiments SET searcher_state = ? WHERE id = ?", (text, experiment_id))

        self._write(body)

    def load_searcher_state(self, experiment_id: int) -> Optional[Dict[str, Any]]:
        """The last saved searcher state, or None."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT searcher_state FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        if row is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        return loads_json(row[0])

    def delete_experiment(self, experiment_id: int) -> List[Dict[str, Any]]:
        """Delete the experiment's rows (trials, metrics, checkpoints, logs).

        Returns its checkpoints (``uuid``, ``path``, ...) so the caller can remove the files;
        the store never touches files.
        """

        def body(conn: sqlite3.Connection) -> List[Dict[str, Any]]:
            self._experiment_row(conn, experiment_id)
            checkpoints = checkpoint_rows(conn, "t.experiment_id = ?", (experiment_id,))
            trial_ids = "(SELECT id FROM trials WHERE experiment_id = ?)"
            conn.execute("DELETE FROM logs WHERE experiment_id = ?", (experiment_id,))
            for table in ("training_metrics", "validation_metrics", "checkpoints", "trial_runs"):
                conn.execute(f"DELETE FROM {table} WHERE trial_id IN {trial_ids}", (experiment_id,))
            conn.execute("DELETE FROM trials WHERE experiment_id = ?", (experiment_id,))
            conn.execute("DELETE FROM experiments WHERE id = ?", (experiment_id,))
            return checkpoints

        return self._write(body)

    # --- trials -------------------------------------------------------------------------------

    def create_trial(
        self,
        experiment_id: int,
        request_id: Any,
        hparams: Dict[str, Any],
        seed: Optional[int],
        state: str = TrialState.ACTIVE,
    ) -> int:
        """Record a trial the searcher asked for (``request_id`` is kept as given: int or str)."""
        state = check_member(state, TrialState, "trial state")
        hparams_text = dumps_json(hparams, "hparams")
        now = time.time()

        def body(conn: sqlite3.Connection) -> int:
            self._experiment_row(conn, experiment_id)
            cursor = conn.execute(
                "INSERT INTO trials (experiment_id, request_id, state, hparams, seed, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (experiment_id, request_id, state, hparams_text, seed, now),
            )
            assert cursor.lastrowid is not None  # set by every INSERT
            return int(cursor.lastrowid)

        return self._write(body)

    @staticmethod
    def _trial_dict(row: sqlite3.Row) -> Dict[str, Any]:
        return {
            "id": row["id"],
            "experiment_id": row["experiment_id"],
            "request_id": row["request_id"],
            "state": row["state"],
            "hparams": loads_json(row["hparams"]),
            "seed": row["seed"],
            "total_batches": row["total_batches"],
            "restarts": row["restarts"],
            "best_validation": row["best_validation"],
            "latest_checkpoint": row["latest_checkpoint"],
            "created_at": row["created_at"],
            "started_at": row["started_at"],
            "ended_at": row["ended_at"],
            "stopped_early": bool(row["stopped_early"]),
        }

    def get_trial(self, trial_id: int) -> Optional[Dict[str, Any]]:
        """The trial as a dict, or None."""
        row = self._read(
            lambda conn: conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE id = ?", (int(trial_id),)
            ).fetchone()
        )
        return None if row is None else self._trial_dict(row)

    def get_trial_by_request(self, experiment_id: int, request_id: Any) -> Optional[Dict[str, Any]]:
        """The experiment's trial created for the searcher's ``request_id``, or None."""
        row = self._read(
            lambda conn: conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? AND request_id = ?"
                " ORDER BY id LIMIT 1",
                (int(experiment_id), request_id),
            ).fetchone()
        )
        return None if row is None else self._trial_dict(row)

    def list_trials(self, experiment_id: int) -> List[Dict[str, Any]]:
        """The experiment's trials by id."""
        rows = self._read(
            lambda conn: conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? ORDER BY id",
                (int(experiment_id),),
            ).fetchall()
        )
        return [self._trial_dict(r) for r in rows]

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        """Set any of ``state, total_batches, restarts, best_validation, latest_checkpoint,
        stopped_early, started_at``.

        A terminal state stamps ``ended_at``; a non-terminal one clears it. ``started_at`` is
        kept once set: it is when the trial first ran.
        """
        unknown = sorted(set(fields) - set(_TRIAL_FIELDS))
        if unknown:
            raise TypeError(f"update_trial: unknown field(s) {unknown}; allowed: {', '.join(_TRIAL_FIELDS)}")
        if not fields:
            return
        values = dict(fields)
        if "state" in values:
            values["state"] = check_member(values["state"], TrialState, "trial state")
            values["ended_at"] = time.time() if values["state"] in TERMINAL_STATES else None
        assignments = ", ".join(
            f"{k} = COALESCE({k}, ?)" if k == "started_at" else f"{k} = ?" for k in values
        )

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                f"UPDATE trials SET {assignments} WHERE id = ?", (*values.values(), int(trial_id))
            )
            if cursor.rowcount == 0:
                raise NotFoundError(f"trial {trial_id} not found")

        self._write(body)

    def set_trial_own_length(self, trial_id: int, batches: int) -> None:
        """Record the length (batches) a script trial's ``fit`` trains to, when the searcher sets
        none: the runner resumes the trial to it after a pause, a restart or a lost node."""
        sql = "UPDATE trials SET own_length = ? WHERE id = ?"
        self._write(lambda conn: conn.execute(sql, (int(batches), int(trial_id))))

    def trial_own_length(self, trial_id: int) -> Optional[int]:
        """What :meth:`set_trial_own_length` recorded for the trial (None: nothing yet)."""
        sql = "SELECT own_length FROM trials WHERE id = ?"
        row = self._read(lambda conn: conn.execute(sql, (int(trial_id),)).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def add_trial_run(
        self, trial_id: int, *, executor: str, host: str, slots: int, devices: Sequence[str] = ()
    ) -> None:
        """Record that a run of the trial started now on ``host`` (``devices``: the GPU ids it
        holds; none on CPU slots), placed by ``executor``."""

        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO trial_runs (trial_id, started_at, executor, host, slots, devices)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (trial_id, time.time(), executor, host, slots, dumps_json(list(devices), "devices")),
            )

        self._write(body)

    # --- describe -----------------------------------------------------------------------------

    def describe_experiment(self, experiment_id: int, metrics: bool = True) -> Optional[Dict[str, Any]]:
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
        grows with training; ``workloads`` reads them a trial at a time). Read in one snapshot.
        """

        if self.get_experiment(experiment_id) is None:  # (a gone runner accounted for first)
            return None

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            try:
                exp = self._experiment_dict(self._experiment_row(conn, experiment_id))
            except NotFoundError:
                return None
            labels, notes = conn.execute(
                "SELECT labels, notes FROM experiments WHERE id = ?", (experiment_id,)
            ).fetchone()
            exp.update(labels=loads_json(labels), notes=notes)
            trials = conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? ORDER BY id", (experiment_id,)
            ).fetchall()
            where = ("t.experiment_id = ?", (experiment_id,))
            exp["trials"] = self._describe_trials(conn, trials, *where, metrics)
            return exp

        return self._read(body)

    def describe_trial(self, trial_id: int, metrics: bool = True) -> Optional[Dict[str, Any]]:
        """One trial in the shape of ``describe_experiment``'s ``trials`` entries, or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            rows = conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE id = ?", (int(trial_id),)
            ).fetchall()
            if not rows:
                return None
            return self._describe_trials(conn, rows, "t.id = ?", (int(trial_id),), metrics)[0]

        return self._read(body)

    def _describe_trials(
        self,
        conn: sqlite3.Connection,
        rows: List[sqlite3.Row],
        where: str,
        params: Tuple[Any, ...],
        metrics: bool = True,
    ) -> List[Dict[str, Any]]:
        trials: Dict[int, Dict[str, Any]] = {}
        for row in rows:
            trial = self._trial_dict(row)
            trials[row["id"]] = {
                "id": trial["id"],
                "state": trial["state"],
                "hparams": trial["hparams"],
                "seed": trial["seed"],
                "total_batches": trial["total_batches"],
                "restarts": trial["restarts"],
                **({"training_metrics": [], "validation_metrics": []} if metrics else {}),
                "checkpoints": [],
                "best_validation": trial["best_validation"],
                "experiment_id": trial["experiment_id"],
                "request_id": trial["request_id"],
                "latest_checkpoint": trial["latest_checkpoint"],
                "created_at": trial["created_at"],
                "started_at": trial["started_at"],
                "ended_at": trial["ended_at"],
                "stopped_early": trial["stopped_early"],
                "runs": [],
            }
        for trial_id, started, executor, host, slots, devices in conn.execute(
            "SELECT r.trial_id, r.started_at, r.executor, r.host, r.slots, r.devices FROM trial_runs r"
            f" JOIN trials t ON t.id = r.trial_id WHERE {where} ORDER BY r.id",
            params,
        ):
            run = {"started_at": started, "executor": executor, "host": host, "slots": slots}
            trials[trial_id]["runs"].append({**run, "devices": loads_json(devices)})
        for table in ("training_metrics", "validation_metrics") if metrics else ():
            for trial_id, batches, values in conn.execute(
                f"SELECT m.trial_id, m.total_batches, m.metrics FROM {table} m JOIN trials t"
                f" ON t.id = m.trial_id WHERE {where} ORDER BY m.trial_id, m.total_batches",
                params,
            ):
                trials[trial_id][table].append({"total_batches": batches, "metrics": loads_json(values)})
        for ckpt in checkpoint_rows(conn, where, params):
            trials[ckpt["trial_id"]]["checkpoints"].append(
                {
                    "uuid": ckpt["uuid"],
                    "path": ckpt["path"],
                    "total_batches": ckpt["total_batches"],
                    "metrics": ckpt["metrics"],
                }
            )
        return list(trials.values())
