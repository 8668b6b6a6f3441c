"""Pause and kill requests on an experiment's row and kill requests on a trial's: what
``det-lite experiment pause|kill`` and the SDK write and what the runner and the chief poll."""

from __future__ import annotations

import sqlite3
import time
from typing import List, Optional

from determined_lite.store._db import NotFoundError, Repository
from determined_lite.store._experiments import experiment_row, stop_experiment
from determined_lite.store._paths import process_alive
from determined_lite.store._states import (
    TERMINAL_STATES,
    Action,
    ActionOutcome,
    ExperimentState,
    TrialState,
    check_member,
)


def _record_request(
    conn: sqlite3.Connection, experiment_id: int, current: Optional[str], action: Action
) -> Action:
    effective = Action.KILL if Action.KILL in (current, action) else action
    conn.execute("UPDATE experiments SET requested_action = ? WHERE id = ?", (effective, experiment_id))
    return effective


class Requests(Repository):
    """Pause and kill requests (``store.requests``): the experiment rows' ``requested_action``,
    the trials' ``kill_requested``, and the state change that applies one when no process runs
    the experiment."""

    def request(self, experiment_id: int, action: str) -> Action:
        """Ask the experiment's processes to ``pause`` or ``kill``; returns the pending action.

        A kill replaces a pending pause; a pause does not replace a pending kill.
        """
        requested = Action(check_member(action, Action, "action"))

        def body(conn: sqlite3.Connection) -> Action:
            row = experiment_row(conn, experiment_id)
            return _record_request(conn, experiment_id, row["requested_action"], requested)

        return self.db.write(body)

    def pending(self, experiment_id: int) -> Optional[str]:
        """``"pause"``, ``"kill"`` or None. Cheap: workers poll it every scheduling unit."""
        row = self.db.read(
            lambda conn: conn.execute(
                "SELECT requested_action FROM experiments WHERE id = ?", (int(experiment_id),)
            ).fetchone()
        )
        return None if row is None else row[0]

    def clear(self, experiment_id: int, action: Optional[str] = None) -> None:
        """Drop the pending action (only if it is ``action``, when given: a newer kill survives)."""

        def body(conn: sqlite3.Connection) -> None:
            if action is None:
                conn.execute("UPDATE experiments SET requested_action = NULL WHERE id = ?", (experiment_id,))
            else:
                conn.execute(
                    "UPDATE experiments SET requested_action = NULL WHERE id = ? AND requested_action = ?",
                    (experiment_id, action),
                )

        self.db.write(body)

    def apply(self, experiment_id: int, action: str) -> ActionOutcome:
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
            row = experiment_row(conn, experiment_id)
            state = row["state"]
            if state in TERMINAL_STATES or (pause and state == ExperimentState.PAUSED):
                return ActionOutcome.NOOP
            if process_alive(row["pid"], row["pid_token"]):
                _record_request(conn, experiment_id, row["requested_action"], requested)
                return ActionOutcome.REQUESTED
            state = ExperimentState.PAUSED if pause else ExperimentState.CANCELED
            stop_experiment(conn, experiment_id, state)
            return ActionOutcome.PAUSED if pause else ActionOutcome.CANCELED

        return self.db.write(body)

    def kill_trial(self, trial_id: int) -> bool:
        """Kill one trial (Determined's ``Trial.kill()``): its experiment's runner stops it and
        ends it CANCELED, the search goes on (``trial_kills``); with no live runner the
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
            experiment = experiment_row(conn, row["experiment_id"])
            conn.execute("UPDATE trials SET kill_requested = 1 WHERE id = ?", (int(trial_id),))
            if not process_alive(experiment["pid"], experiment["pid_token"]):
                conn.execute(
                    "UPDATE trials SET state = ?, ended_at = ? WHERE id = ?",
                    (TrialState.CANCELED, time.time(), int(trial_id)),
                )
            return True

        return self.db.write(body)

    def trial_kills(self, experiment_id: int) -> List[int]:
        """The trials of ``experiment_id`` whose kill the runner has not handled yet."""
        rows = self.db.read(
            lambda conn: conn.execute(
                "SELECT id FROM trials WHERE experiment_id = ? AND kill_requested = 1", (int(experiment_id),)
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    def clear_trial_kill(self, trial_id: int) -> None:
        """The runner handled the kill of ``trial_id``."""
        sql = "UPDATE trials SET kill_requested = 0 WHERE id = ?"
        self.db.write(lambda conn: conn.execute(sql, (int(trial_id),)))
