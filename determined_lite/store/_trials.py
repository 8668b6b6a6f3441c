"""The ``trials`` and ``trial_runs`` tables: the trials a searcher asked for, their progress and
where each run was placed, and a trial's ``describe`` form.

Rows come back as plain dicts with JSON columns decoded. ``best_validation`` is a REAL column,
where SQLite turns NaN into NULL (``None``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from determined_lite.store._checkpoints import checkpoint_rows
from determined_lite.store._db import NotFoundError, Repository, dumps_json, loads_json
from determined_lite.store._states import TERMINAL_STATES, TrialState, check_member

_TRIAL_FIELDS = (
    "state",
    "total_batches",
    "restarts",
    "best_validation",
    "latest_checkpoint",
    "stopped_early",
    "started_at",
)
TRIAL_COLUMNS = (
    "id, experiment_id, request_id, state, hparams, seed, total_batches, restarts, best_validation,"
    " latest_checkpoint, created_at, ended_at, stopped_early, started_at"
)


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


def _described(row: sqlite3.Row, metrics: bool) -> Dict[str, Any]:
    """A trial row in ``describe``'s form, its records still empty."""
    trial = _trial_dict(row)
    return {
        **{key: trial[key] for key in ("id", "state", "hparams", "seed", "total_batches", "restarts")},
        **({"training_metrics": [], "validation_metrics": []} if metrics else {}),
        "checkpoints": [],
        **{
            key: trial[key]
            for key in ("best_validation", "experiment_id", "request_id", "latest_checkpoint", "created_at")
        },
        **{key: trial[key] for key in ("started_at", "ended_at", "stopped_early")},
        "runs": [],
    }


def describe_trials(
    conn: sqlite3.Connection,
    rows: List[sqlite3.Row],
    where: str,
    params: Tuple[Any, ...],
    metrics: bool = True,
) -> List[Dict[str, Any]]:
    """The trials of ``rows`` with their runs, metrics (when ``metrics``) and checkpoints, read
    with ``where`` (over ``trials t``) in ``conn``'s snapshot."""
    trials = {row["id"]: _described(row, metrics) for row in rows}
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
            {key: ckpt[key] for key in ("uuid", "path", "total_batches", "metrics")}
        )
    return list(trials.values())


class Trials(Repository):
    """Trials (``store.trials``). Unknown ids raise ``NotFoundError`` from writers; getters
    return None."""

    def create(
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
            found = conn.execute("SELECT 1 FROM experiments WHERE id = ?", (int(experiment_id),)).fetchone()
            if found is None:
                raise NotFoundError(f"experiment {experiment_id} not found")
            cursor = conn.execute(
                "INSERT INTO trials (experiment_id, request_id, state, hparams, seed, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (experiment_id, request_id, state, hparams_text, seed, now),
            )
            assert cursor.lastrowid is not None  # set by every INSERT
            return int(cursor.lastrowid)

        return self.db.write(body)

    def get(self, trial_id: int) -> Optional[Dict[str, Any]]:
        """The trial as a dict, or None."""
        row = self.db.read(
            lambda conn: conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE id = ?", (int(trial_id),)
            ).fetchone()
        )
        return None if row is None else _trial_dict(row)

    def get_by_request(self, experiment_id: int, request_id: Any) -> Optional[Dict[str, Any]]:
        """The experiment's trial created for the searcher's ``request_id``, or None."""
        row = self.db.read(
            lambda conn: conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? AND request_id = ?"
                " ORDER BY id LIMIT 1",
                (int(experiment_id), request_id),
            ).fetchone()
        )
        return None if row is None else _trial_dict(row)

    def list(self, experiment_id: int) -> List[Dict[str, Any]]:
        """The experiment's trials by id."""
        rows = self.db.read(
            lambda conn: conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE experiment_id = ? ORDER BY id",
                (int(experiment_id),),
            ).fetchall()
        )
        return [_trial_dict(r) for r in rows]

    def update(self, trial_id: int, **fields: Any) -> None:
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

        self.db.write(body)

    def set_own_length(self, trial_id: int, batches: int) -> None:
        """Record the length (batches) a script trial's ``fit`` trains to, when the searcher sets
        none: the runner resumes the trial to it after a pause, a restart or a lost node."""
        sql = "UPDATE trials SET own_length = ? WHERE id = ?"
        self.db.write(lambda conn: conn.execute(sql, (int(batches), int(trial_id))))

    def own_length(self, trial_id: int) -> Optional[int]:
        """What :meth:`set_own_length` recorded for the trial (None: nothing yet)."""
        sql = "SELECT own_length FROM trials WHERE id = ?"
        row = self.db.read(lambda conn: conn.execute(sql, (int(trial_id),)).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def add_run(
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

        self.db.write(body)

    def runs(self, experiment_id: int) -> Dict[int, List[Dict[str, Any]]]:
        """Each of the experiment's trials' runs, oldest first: ``{trial_id: [{"started_at",
        "executor", "host", "slots", "devices"}]}`` (trials that never ran are absent)."""

        def body(conn: sqlite3.Connection) -> Dict[int, List[Dict[str, Any]]]:
            out: Dict[int, List[Dict[str, Any]]] = {}
            for trial_id, started, executor, host, slots, devices in conn.execute(
                "SELECT r.trial_id, r.started_at, r.executor, r.host, r.slots, r.devices FROM trial_runs r"
                " JOIN trials t ON t.id = r.trial_id WHERE t.experiment_id = ? ORDER BY r.id",
                (int(experiment_id),),
            ):
                run = {"started_at": started, "executor": executor, "host": host, "slots": slots}
                out.setdefault(trial_id, []).append({**run, "devices": loads_json(devices)})
            return out

        return self.db.read(body)

    def describe(self, trial_id: int, metrics: bool = True) -> Optional[Dict[str, Any]]:
        """One trial in the shape of ``store.experiments.describe``'s ``trials`` entries, or None."""

        def body(conn: sqlite3.Connection) -> Optional[Dict[str, Any]]:
            rows = conn.execute(
                f"SELECT {TRIAL_COLUMNS} FROM trials WHERE id = ?", (int(trial_id),)
            ).fetchall()
            if not rows:
                return None
            return describe_trials(conn, rows, "t.id = ?", (int(trial_id),), metrics)[0]

        return self.db.read(body)
