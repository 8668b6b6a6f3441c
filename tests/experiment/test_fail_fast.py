"""Errors that would recur are not retried (issue 16, item 1; issue 29, items 4 and 5; issue 28,
item 5).

A trial that fails before completing a batch (a hyperparameter typo in ``__init__``), or on
det-lite's check of what it returned (a searcher metric it never reports, ``train_batch``
returning None), ends in ERROR at once, whatever ``max_restarts`` says; a crash after progress
is restarted (``test_experiment_e2e.test_restart_after_failure_resumes_from_checkpoint``), but
not again when the restart fails the same way at the same batch (det-lite replays a run
exactly). det-lite's checks print no det-lite stack, and the first trial of a search that fails
one stops the search. Before this, each such trial ran ``max_restarts + 1`` times and printed as
many tracebacks, in every trial of the search.
"""

from __future__ import annotations

import os

import pytest

from determined_lite._errors import MissingMetricError, OutputTypeError, TrialCheckError, UndefinedHParamError
from determined_lite.launch.worker import failure_kind
from determined_lite.pytorch._compile import GraphChangedError
from determined_lite.runtime._failures import (
    FailureKind,
    FailurePoint,
    NoRestart,
    own_code_error,
    read_failure_point,
    read_no_restart,
    record_failure_point,
    record_no_restart,
)
from tests.cli_helpers import REPO, cli, describe, write_config

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")

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
    assert failure_kind(ValueError("x"), progressed=False, script=True) is FailureKind.BEFORE_REPORT
    assert issubclass(MissingMetricError, TrialCheckError)
    # Wrong return types and hyperparameter typos are checks too (and still Determined's errors).
    assert issubclass(OutputTypeError, TypeError) and issubclass(UndefinedHParamError, ValueError)
    assert failure_kind(OutputTypeError("None"), progressed=True) is FailureKind.TRIAL_CHECK
    assert NoRestart(0, FailureKind.TRIAL_CHECK, "UndefinedHParamError: x").fails_every_trial
    assert not NoRestart(0, FailureKind.BEFORE_PROGRESS, "ValueError: lr").fails_every_trial
    # A compiled graph's retrace may depend on a hyperparameter: its trial ends, not the search.
    assert failure_kind(GraphChangedError("shape"), progressed=True) is FailureKind.TRIAL_CHECK_ONE
    assert not NoRestart(0, FailureKind.TRIAL_CHECK_ONE, "GraphChangedError: x").fails_every_trial


def test_a_failure_recurs_at_the_same_batch_with_the_same_error_or_place(tmp_path):
    first = FailurePoint(0, "RuntimeError: boom", 3, "model_def.py:77 in train_batch")
    assert FailurePoint(0, "RuntimeError: boom", 3, None).recurs(first)
    assert FailurePoint(0, "RuntimeError: boom at 0x7f", 3, "model_def.py:77 in train_batch").recurs(first)
    assert not FailurePoint(0, "RuntimeError: boom", 5, "model_def.py:77 in train_batch").recurs(first)
    assert not FailurePoint(1, "RuntimeError: boom", 3, "model_def.py:77 in train_batch").recurs(first)
    assert not FailurePoint(0, "OSError: reset", 3, "socket.py:1 in recv").recurs(first)
    assert not first.recurs(None)
    result = str(tmp_path / "result.json")
    assert read_failure_point(result) is None
    record_failure_point(result, 1, first)
    assert read_failure_point(result) == first


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
    # The error once (issue 43: it was printed three times), then one line of what happens.
    assert logs.count("hyperparameter 'lrr' is not defined") == 1, logs
    assert (
        f"trial {trial['id']} failed: rank 0: UndefinedHParamError (above); not restarted: "
        "det-lite's check of the trial failed, so a restart would fail alike" in logs
    )
    assert "det-lite/determined_lite" not in logs and "worker.py" not in logs  # the user's frame only
    # The user's file, not the snapshot's copy the trial ran from.
    assert f'File "{os.path.join(LINEAR, "model_def.py")}", line ' in logs, logs
    assert os.path.join("experiments", "1", "context") not in logs
    assert "det-lite's check of the trial failed" in logs  # a typo is a check now (issue 29, item 5)
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
    # det-lite's own check: one line, no det-lite stack (issue 29, item 5; it printed 27 lines).
    assert logs.count("Traceback (most recent call last)") == 0, logs
    assert "det-lite: MissingMetricError: searcher metric 'val_acc'" in logs
    assert "failed: rank 0: MissingMetricError (above); not restarted: det-lite's check" in logs
    assert "det-lite's check of the trial failed" in logs


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
    assert "failed: rank 1: UndefinedHParamError (above); not restarted" in logs
    assert logs.count("hyperparameter 'lrr' is not defined") == 1, logs
    assert "restarting trial" not in logs


def test_an_error_that_recurs_after_progress_runs_twice_and_the_search_goes_on(tmp_path):
    # Issue 29, item 4: a trial raising at batch 3 every time ran max_restarts + 1 times, each
    # retry "from its latest checkpoint" that did not exist. It depends on a hyperparameter
    # here, so the other trial of the grid completes: such an error does not stop the search.
    path = _config(
        tmp_path,
        **{"hyperparameters.fail_at": {"type": "categorical", "vals": [3, None]}},
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = {t["hparams"]["fail_at"]: t for t in describe(1)["trials"]}
    assert trials[None]["state"] == "COMPLETED" and trials[None]["total_batches"] == 12
    failing = trials[3]
    assert failing["state"] == "ERROR" and failing["restarts"] == 1, failing
    logs = _trial_logs(failing["id"])
    assert logs.count("Traceback (most recent call last)") == 2, logs
    assert f"restarting trial {failing['id']} from the start (1/3)" in logs
    assert "latest checkpoint" not in logs
    assert (
        f"trial {failing['id']} not restarted: it failed again the same way (rank 0: RuntimeError: "
        "injected failure at batch 3 after 3 batches (model_def.py:" in logs
    ), logs
    assert "stopping the search" not in proc.stdout


def _errored(tmp_path, restarts: int, **hparams: object) -> str:
    """The logs of the one trial of an experiment with ``hparams`` that ended in ERROR after
    ``restarts`` restarts."""
    path = _config(tmp_path, **{f"hyperparameters.{k}": v for k, v in hparams.items()})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode != 0
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == restarts, trial
    return _trial_logs(trial["id"])


def _raised(code_dir, source: str) -> BaseException:
    """The error ``source`` raises, run as a file of ``code_dir`` (a script's context)."""
    path = os.path.join(str(code_dir), "script.py")
    try:
        exec(compile(source, path, "exec"), {})
    except Exception as e:  # noqa: BLE001 -- the error under test
        return e
    raise AssertionError("nothing raised")


def test_own_code_errors_are_the_scripts_raises_for_reasons_of_its_own(tmp_path):
    assert own_code_error(_raised(tmp_path, "raise RuntimeError('bad step')"), str(tmp_path))
    assert own_code_error(_raised(tmp_path, "assert 1 == 2"), str(tmp_path))
    assert own_code_error(_raised(tmp_path, "1 / 0"), str(tmp_path))
    # The machine's or the network's errors, and ones raised while handling them, may pass.
    assert not own_code_error(_raised(tmp_path, "raise ConnectionError('reset')"), str(tmp_path))
    assert not own_code_error(_raised(tmp_path, "open('/nonexistent/x')"), str(tmp_path))
    chained = "try:\n    raise TimeoutError('slow')\nexcept OSError as e:\n    raise RuntimeError('x') from e"
    assert not own_code_error(_raised(tmp_path, chained), str(tmp_path))
    # Raised outside the context (a library's frame): not the script's own.
    lib = tmp_path.parent / f"{tmp_path.name}-lib"
    assert not own_code_error(_raised(lib, "raise RuntimeError('x')"), str(tmp_path))
    assert not own_code_error(RuntimeError("no traceback"), str(tmp_path))


def test_a_core_api_script_failing_in_its_own_code_runs_once(tmp_path):
    # Issue 40, item 8: it ran twice (failing after batch 3, resumed from its checkpoint at
    # batch 2, failing there again). An error the script's own code raises, not the machine's
    # or the network's, recurs when the loop replays the same steps: it is not retried.
    path = write_config(
        os.path.join(SCRIPTS, "core.yaml"), tmp_path, max_restarts=3, **{"hyperparameters.fail_at": 3}
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0, trial
    logs = _trial_logs(trial["id"])
    assert logs.count("Traceback (most recent call last)") == 1, logs
    assert (
        f"trial {trial['id']} failed: rank 0: RuntimeError (above); not restarted: the script's own "
        "code raised it, not the machine or the network (no I/O, memory or connection error), so a "
        "restart from its checkpoint would fail alike"
    ) in logs, logs  # the error once (main's failed_line), then why it is not restarted
    assert "restarting trial" not in logs


def test_a_core_api_script_failing_again_on_a_connection_error_is_not_restarted(tmp_path):
    # A connection error may pass: restarted (from its checkpoint at batch 2), and when it
    # fails again the same way at the same batch, not again.
    path = write_config(
        os.path.join(SCRIPTS, "core.yaml"),
        tmp_path,
        max_restarts=3,
        **{"hyperparameters.fail_at": 3, "hyperparameters.fail_with": "ConnectionError"},
    )
    proc = cli("experiment", "create", path, SCRIPTS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 1, trial
    logs = _trial_logs(trial["id"])
    assert f"restarting trial {trial['id']} from its latest checkpoint (batch 2) (1/3)" in logs, logs
    assert "it failed again the same way (rank 0: ConnectionError: injected failure after batch 3" in logs
    assert "failed before completing a batch" not in logs


def test_train_batch_returning_none_is_not_restarted(tmp_path):
    # Issue 28, item 5: 2 restarts and 3 tracebacks; now det-lite's check, one line, once.
    logs = _errored(tmp_path, 0, return_none=True)
    assert "Traceback" not in logs, logs
    assert "det-lite: OutputTypeError: LinearTrial.train_batch() must return a torch.Tensor" in logs
    assert "restarting trial" not in logs


def test_evaluate_batch_raising_every_time_is_restarted_once(tmp_path):
    # Issue 28, item 5: the first validation (after 4 batches) raises; the restart fails the
    # same way at the same batch, so there is no third run.
    logs = _errored(tmp_path, 1, eval_raises=True)
    assert logs.count("\nValueError: evaluate_batch cannot score this batch\n") == 2, logs
    assert "not restarted: it failed again the same way (rank 0: ValueError: evaluate_batch" in logs


def test_a_misspelt_hyperparameter_stops_the_search(tmp_path):
    # Issue 29, item 5: 12 tracebacks over 4 trials. The first trial that fails det-lite's
    # check stops the search with one line; the trials not yet started never run.
    path = _config(
        tmp_path,
        **{
            "hyperparameters.hparam_typo": "lrr",
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02, 0.03, 0.04]},
        },
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    experiment = describe(1)
    assert experiment["state"] == "ERROR"
    states = sorted(t["state"] for t in experiment["trials"])
    assert states.count("ERROR") >= 1 and states.count("CANCELED") >= 2, states  # 2 may run at once
    assert all(t["restarts"] == 0 for t in experiment["trials"])
    out = proc.stdout + proc.stderr
    assert out.count("stopping the search: trial ") == 1, out
    assert "failed det-lite's check (UndefinedHParamError, above), which every trial would fail" in out
    assert out.count("Traceback (most recent call last)") <= 2, out  # the trials that ran at once
    assert "restarting trial" not in out and "determined_lite/" not in out
