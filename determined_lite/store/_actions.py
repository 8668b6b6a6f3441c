"""Pause and kill requests on an experiment's row: what ``det-lite experiment pause|kill``
writes and what the runner and the chief poll (``Store`` derives from this)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Dict, List, Optional, Tuple, Type

from determined_lite.store._db import NotFoundError, StoreError
from determined_lite.store._paths import lock_held, process_alive, runner_lock_path
from determined_lite.store._records import TrialRecords
from determined_lite.store._states import (
    TERMINAL_STATES,
    Action,
    ActionOutcome,
    ExperimentState,
    TextEnum,
    TrialState,
)

EXPERIMENT_COLUMNS = (
    "id, name, kind, state, context_dir, config_path, pid, pid_token, requested_action, created_at, ended_at"
)


def check_member(value: str, allowed: Type[TextEnum], what: str) -> str:
    """``value`` as the plain text of its ``allowed`` member; ValueError naming the choices."""
    choices = [member.value for member in allowed]
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}; got {value!r}")
    return allowed(value).value


class ExperimentRequests(TrialRecords):
    """The experiment rows' ``requested_action`` (pause/kill) and the state change that applies
    one when no process runs the experiment."""

    def _experiment_row(self, conn: sqlite3.Connection, experiment_id: int) -> sqlite3.Row:
        row = conn.execute(
            f"SELECT {EXPERIMENT_COLUMNS}, config FROM experiments WHERE id = ?", (int(experiment_id),)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        return row

    def request_action(self, experiment_id: int, action: str) -> Action:
        """Ask the experiment's processes to ``pause`` or ``kill``; returns the pending action.

        A kill replaces a pending pause; a pause does not replace a pending kill.
        """
        requested = Action(check_member(action, Action, "action"))

        def body(conn: sqlite3.Connection) -> Action:
            row = self._experiment_row(conn, experiment_id)
            return self._record_request(conn, experiment_id, row["requested_action"], requested)

        return self._write(body)

    @staticmethod
    def _record_request(
        conn: sqlite3.Connection, experiment_id: int, current: Optional[str], action: Action
    ) -> Action:
        effective = Action.KILL if Action.KILL in (current, action) else action
        conn.execute("UPDATE experiments SET requested_action = ? WHERE id = ?", (effective, experiment_id))
        return effective

    def pending_action(self, experiment_id: int) -> Optional[str]:
        """``"pause"``, ``"kill"`` or None. Cheap: workers poll it every scheduling unit."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT requested_action FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        return None if row is None else row[0]

    def clear_action(self, experiment_id: int, action: Optional[str] = None) -> None:
        """Drop the pending action (only if it is ``action``, when given: a newer kill survives)."""

        def body(conn: sqlite3.Connection) -> None:
            if action is None:
                conn.execute("UPDATE experiments SET requested_action = NULL WHERE id = ?", (experiment_id,))
            else:
                conn.execute(
                    "UPDATE experiments SET requested_action = NULL WHERE id = ? AND requested_action = ?",
                    (experiment_id, action),
                )

        self._write(body)

    def apply_action(self, experiment_id: int, action: str) -> ActionOutcome:
        """Pause or kill from another process: a request if the experiment's process is alive,
        else the state change itself. Returns what happened:

        * ``"requested"``: a live process will act at its next scheduling-unit boundary;
        * ``"paused"`` / ``"canceled"``: no live process; the experiment (and its unfinished
          trials) are now PAUSED / CANCELED;
        * ``"noop"``: nothing to do (already finished, or pausing a paused experiment).
        """
        requested = Action(check_member(action, Action, "action"))
        pause = requested == Action.PAUSE

        def body(conn: sqlite3.Connection) -> ActionOutcome:
            row = self._experiment_row(conn, experiment_id)
            state = row["state"]
            if state in TERMINAL_STATES or (pause and state == ExperimentState.PAUSED):
                return ActionOutcome.NOOP
            if process_alive(row["pid"], row["pid_token"]):
                self._record_request(conn, experiment_id, row["requested_action"], requested)
                return ActionOutcome.REQUESTED
            self._stop(conn, experiment_id, ExperimentState.PAUSED if pause else ExperimentState.CANCELED)
            return ActionOutcome.PAUSED if pause else ActionOutcome.CANCELED

        return self._write(body)

    def reconcile_runner(self, exp: Dict[str, Any]) -> Dict[str, Any]:
        """``exp`` (a read experiment) as it stands once a gone runner is accounted for: ACTIVE
        with its recorded process dead and its runner lock free (the trials' processes gone
        too: SIGKILL, a closed terminal before the runner could pause, a crash) becomes PAUSED
        with its unfinished trials, so `activate` resumes it and nothing reads ACTIVE with no
        process behind it. Through a read-only store, or when the write fails (a full disk), it
        stays as read (``ACTIVE (not running)``)."""
        if exp["state"] != ExperimentState.ACTIVE or exp["running"] or not exp["pid"] or self.read_only:
            return exp
        if lock_held(runner_lock_path(exp["id"])):  # its trials' processes still exiting
            return exp

        def body(conn: sqlite3.Connection) -> bool:
            row = self._experiment_row(conn, exp["id"])
            if row["state"] != ExperimentState.ACTIVE or row["pid"] != exp["pid"]:
                return False  # another process changed it meanwhile
            self._stop(conn, exp["id"], ExperimentState.PAUSED)
            return True

        try:
            paused = self._write(body)
        except (StoreError, sqlite3.Error):
            return exp
        if paused:
            exp.update(state=ExperimentState.PAUSED.value, pid=None, requested_action=None, running=False)
        return exp

    def request_trial_kill(self, trial_id: int) -> bool:
        """Kill one trial (Determined's ``Trial.kill()``): its experiment's runner stops it and
        ends it CANCELED, the search goes on (``trial_kill_requests``); with no live runner the
        trial is CANCELED now and the runner that resumes the experiment tells its searcher.
        False: the trial had ended already (nothing to do)."""

        def body(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT state, experiment_id FROM trials WHERE id = ?", (int(trial_id),)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"trial {trial_id} not found")
            if row["state"] in TERMINAL_STATES:
                return False
            experiment = self._experiment_row(conn, row["experiment_id"])
            conn.execute("UPDATE trials SET kill_requested = 1 WHERE id = ?", (int(trial_id),))
            if not process_alive(experiment["pid"], experiment["pid_token"]):
                conn.execute(
                    "UPDATE trials SET state = ?, ended_at = ? WHERE id = ?",
                    (TrialState.CANCELED, time.time(), int(trial_id)),
                )
            return True

        return self._write(body)

    def trial_kill_requests(self, experiment_id: int) -> List[int]:
        """The trials of ``experiment_id`` whose kill the runner has not handled yet."""
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT id FROM trials WHERE experiment_id = ? AND kill_requested = 1", (int(experiment_id),)
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    def clear_trial_kill(self, trial_id: int) -> None:
        """The runner handled the kill of ``trial_id``."""
        sql = "UPDATE trials SET kill_requested = 0 WHERE id = ?"
        self._write(lambda conn: conn.execute(sql, (int(trial_id),)))

    @staticmethod
    def _stop(conn: sqlite3.Connection, experiment_id: int, state: ExperimentState) -> None:
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
