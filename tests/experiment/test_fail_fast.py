"""Errors that would recur are not retried (issue 16, item 1).

A trial that fails before completing a batch (a hyperparameter typo in ``__init__``), or on
det-lite's check of what it returned (a searcher metric it never reports), ends in ERROR at
once with one traceback, whatever ``max_restarts`` says; a crash after progress is restarted
(``test_experiment_e2e.test_restart_after_failure_resumes_from_checkpoint``). Before this, each
such trial ran ``max_restarts + 1`` times and printed as many tracebacks.
"""

from __future__ import annotations

import os

import pytest

from determined_lite._errors import MissingMetricError, TrialCheckError
from determined_lite.launch.worker import failure_kind
from determined_lite.runtime._failures import FailureKind, NoRestart, read_no_restart, record_no_restart
from tests.cli_helpers import REPO, cli, describe, write_config

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = pytest.mark.timeout(240)


def _config(tmp_path, **changes) -> str:
    return write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, max_restarts=3, **changes)


def _trial_logs(trial_id: int) -> str:
    return cli("trial", "logs", str(trial_id), check=True).stdout


def test_classification():
    check = MissingMetricError("searcher metric 'acc' is not among the validation metrics ['loss']")
    assert isinstance(check, KeyError) and str(check).startswith("searcher metric 'acc'")
    assert failure_kind(check, progressed=True) is FailureKind.TRIAL_CHECK
    wrapped = RuntimeError("a callback raised")
    wrapped.__cause__ = check
    assert failure_kind(wrapped, progressed=True) is FailureKind.TRIAL_CHECK
    assert failure_kind(ValueError("typo"), progressed=False) is FailureKind.BEFORE_PROGRESS
    assert failure_kind(RuntimeError("CUDA error"), progressed=True) is None  # a crash: restart it
    assert issubclass(MissingMetricError, TrialCheckError)


def test_records_round_trip(tmp_path):
    result = str(tmp_path / "result.json")
    record_no_restart(result, NoRestart(1, FailureKind.BEFORE_PROGRESS, "ValueError: typo"))
    record_no_restart(result, NoRestart(0, FailureKind.TRIAL_CHECK, "MissingMetricError: x"))
    (tmp_path / "result.json.no-restart.rank2.json").write_text("{not json")  # half-written: ignored
    assert [(r.rank, r.kind) for r in read_no_restart(result)] == [
        (0, FailureKind.TRIAL_CHECK),
        (1, FailureKind.BEFORE_PROGRESS),
    ]


def test_hparam_typo_is_not_restarted(tmp_path):
    path = _config(tmp_path, **{"hyperparameters.hparam_typo": "lrr"})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode != 0
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0 and trial["total_batches"] == 0
    logs = _trial_logs(trial["id"])
    assert logs.count("Traceback (most recent call last)") == 1, logs
    assert "hyperparameter 'lrr' is not defined; did you mean 'lr'?" in logs
    assert "not restarted: rank 0: ValueError: hyperparameter 'lrr' is not defined" in logs
    assert "failed before completing a batch" in logs
    assert "restarting trial" not in logs


def test_searcher_metric_never_reported_is_not_restarted(tmp_path):
    # The trial reports val_loss; the searcher waits for a metric it never gets. The first
    # validation (after 4 batches of progress) fails det-lite's check: no restart either.
    path = _config(tmp_path, **{"searcher.metric": "val_acc"})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode != 0
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0
    logs = _trial_logs(trial["id"])
    assert logs.count("Traceback (most recent call last)") == 1, logs
    assert "not restarted: rank 0: MissingMetricError: searcher metric 'val_acc'" in logs
    assert "det-lite's check of what the trial returned failed" in logs


@pytest.mark.timeout(300)
def test_one_rank_failing_before_progress_is_not_restarted_torch(tmp_path):
    # Only rank 1 meets the typo: its record (not the chief's result) stops the restarts.
    path = _config(
        tmp_path,
        **{
            "hyperparameters.hparam_typo": "lrr",
            "hyperparameters.typo_rank": 1,
            "resources": {"slots_per_trial": 2, "distributed_backend": "torch"},
        },
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode != 0
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0
    logs = _trial_logs(trial["id"])
    assert "not restarted: rank 1: ValueError: hyperparameter 'lrr' is not defined" in logs
    assert "restarting trial" not in logs
