"""The store's words are its file format: a renamed enum value would change what SQLite holds and
what `--json` prints (and, for WorkerStatus, what a trial's result.json says). These pin them, and
that a member is its text wherever it is written."""

import json

from determined_lite.runtime._spec import WorkerStatus
from determined_lite.store import (
    TERMINAL_STATES,
    Action,
    ActionOutcome,
    ExperimentState,
    Store,
    TrialState,
)


def test_stored_values():
    states = ["ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "ERROR"]
    assert [s.value for s in ExperimentState] == states
    assert [s.value for s in TrialState] == states
    assert TERMINAL_STATES == {"COMPLETED", "CANCELED", "ERROR"}
    assert [a.value for a in Action] == ["pause", "kill"]
    assert [o.value for o in ActionOutcome] == ["requested", "paused", "canceled", "noop"]
    assert [s.value for s in WorkerStatus] == ["completed", "stopped", "invalid_hp", "error"]


def test_a_member_is_its_text():
    for member in (ExperimentState.PAUSED, TrialState.ERROR, Action.KILL, WorkerStatus.INVALID_HP):
        assert member == member.value and hash(member) == hash(member.value)
        assert str(member) == f"{member}" == "%s" % member == member.value
        assert f"{member:>12}" == f"{member.value:>12}"
        assert json.dumps({"x": member}) == json.dumps({"x": member.value})
    assert ExperimentState.CANCELED == TrialState.CANCELED


def test_members_are_written_as_plain_text(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp_id = store.experiments.create({"name": "x"}, "/ctx", "/ctx/e.yaml", state=ExperimentState.PAUSED)
    trial_id = store.trials.create(exp_id, 0, {}, 1, state=TrialState.ACTIVE)
    store.requests.request(exp_id, Action.KILL)
    row = store.db.read(
        lambda conn: conn.execute(
            "SELECT e.state, typeof(e.state), e.requested_action, t.state FROM experiments e"
            " JOIN trials t ON t.experiment_id = e.id WHERE t.id = ?",
            (trial_id,),
        ).fetchone()
    )
    assert tuple(row) == ("PAUSED", "text", "kill", "ACTIVE")
    assert type(store.experiments.get(exp_id)["state"]) is str
    store.close()
