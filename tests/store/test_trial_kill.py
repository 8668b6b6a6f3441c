"""``store.requests.kill_trial`` (the SDK's ``Trial.kill()``): a request the live runner answers
(tests/client/test_sdk_experiment.py), or the trial CANCELED now when no process runs its
experiment, the request kept for the runner that resumes it; an ended trial stays as it is."""

import pytest

from determined_lite.store import ExperimentState, NotFoundError, Store, TrialState


def test_a_trial_of_a_paused_experiment_is_canceled_now_and_the_request_kept(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp_id = store.experiments.create({"name": "x"}, "/ctx", "/ctx/e.yaml", state=ExperimentState.PAUSED)
    paused = store.trials.create(exp_id, 0, {}, 1, state=TrialState.PAUSED)
    done = store.trials.create(exp_id, 1, {}, 2, state=TrialState.COMPLETED)
    assert store.requests.kill_trial(paused) is True
    assert store.requests.kill_trial(done) is False
    states = {t["id"]: t["state"] for t in store.trials.list(exp_id)}
    assert states == {paused: "CANCELED", done: "COMPLETED"}
    assert store.experiments.get(exp_id)["state"] == "PAUSED"  # the experiment goes on
    assert store.requests.trial_kills(exp_id) == [paused]
    store.requests.clear_trial_kill(paused)
    assert store.requests.trial_kills(exp_id) == []
    with pytest.raises(NotFoundError, match="trial 99 not found"):
        store.requests.kill_trial(99)
    store.close()


def test_det_lite_trial_kill_is_determineds_command(tmp_path, _det_lite_home):
    """`det-lite trial kill ID` (Determined's `det trial kill`): before, no such command (exit 2)."""
    from tests.cli_helpers import cli

    store = Store()
    exp_id = store.experiments.create({"name": "x"}, "/ctx", "/ctx/e.yaml", state=ExperimentState.PAUSED)
    paused = store.trials.create(exp_id, 0, {}, 1, state=TrialState.PAUSED)
    done = store.trials.create(exp_id, 1, {}, 2, state=TrialState.COMPLETED)
    killed = cli("trial", "kill", str(paused))
    assert (killed.returncode, killed.stdout) == (0, f"Killed trial {paused}\n")
    assert store.trials.get(paused)["state"] == TrialState.CANCELED
    ended = cli("trial", "kill", str(done))
    assert ended.returncode == 0
    assert ended.stdout == f"Trial {done} already ended (COMPLETED); nothing to kill.\n"
    missing = cli("trial", "kill", "99")
    assert (missing.returncode, missing.stderr) == (2, "det-lite: error: trial 99 not found\n")
