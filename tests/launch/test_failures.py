"""The launchers' shared failure protocol: failure records, which failure is reported, and the
failure result (which keeps what the chief reported)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import pytest

from determined_lite.launch import WorkerResult, worker_command
from determined_lite.launch._failures import (
    STOP_SIGNALS,
    primary_failure,
    signal_name,
    stopped_exit_code,
    write_failure_result,
)
from determined_lite.runtime._failures import (
    FAILURE_PREFIX_ENV,
    WorkerFailure,
    agent_failure_file,
    read_failures,
    read_worker_failures,
    record_worker_failure,
    remove_failures,
    remove_worker_failures,
    worker_failure_file,
    worker_failure_prefix,
    write_failure,
)


def test_failure_result_keeps_the_chiefs_report(tmp_path: Path) -> None:
    path = str(tmp_path / "result.json")
    WorkerResult(status="completed", total_batches=12, best_validation=0.25).save(path)
    write_failure_result(path, "rank 1: RuntimeError: boom")
    result = WorkerResult.load(path)
    assert (result.status, result.error) == ("error", "rank 1: RuntimeError: boom")
    assert (result.total_batches, result.best_validation) == (12, 0.25)


def test_failure_result_keeps_an_action_required_report(tmp_path: Path) -> None:
    """A launcher's failure result must not hide why a trial needs the user (the runner pauses
    the experiment instead of restarting the trial), nor should the exit status."""
    path = str(tmp_path / "result.json")
    needed = "no space left on /ckpts: the checkpoint at batch 4 could not be written"
    WorkerResult(status="error", error=f"rank 0: DiskFullError: {needed}", action_required=needed).save(path)
    write_failure_result(path, "rank 0: DiskFullError: no space left on /ckpts")
    after = WorkerResult.after_exit(path, 1)
    assert (after.status, after.action_required) == ("error", needed)
    assert after.error == "rank 0: DiskFullError: no space left on /ckpts"


def test_failure_result_without_a_report_or_with_a_broken_one(tmp_path: Path) -> None:
    missing, broken = str(tmp_path / "a.json"), tmp_path / "b.json"
    broken.write_text("{not json")
    for path in (missing, str(broken)):
        write_failure_result(path, "workers exited with status 1")
        result = WorkerResult.load(path)
        assert (result.status, result.error, result.total_batches) == (
            "error",
            "workers exited with status 1",
            0,
        )


def test_worker_command_runs_the_worker_module_unbuffered() -> None:
    assert worker_command("/x/spec.json") == [
        sys.executable,
        "-u",
        "-m",
        "determined_lite.launch.worker",
        "/x/spec.json",
    ]


# --- the failure record ----------------------------------------------------------------------


def test_a_recorded_error_round_trips_through_its_file(tmp_path: Path) -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError as e:
        failure = WorkerFailure.of_error(e, rank=3)
    assert (failure.rank, failure.error, failure.exit_code) == (3, "ValueError: boom", None)
    assert failure.traceback is not None
    assert failure.traceback.splitlines()[-2:] == ["ValueError: boom", "second line"]
    path = worker_failure_file(str(tmp_path / "result.json.failure"), 3)
    assert path == str(tmp_path / "result.json.failure.rank3.json")
    write_failure(path, failure)
    assert not os.path.exists(path + ".tmp")
    with open(path) as f:
        assert sorted(json.load(f)) == ["error", "rank", "timestamp", "traceback"]
    assert read_failures([path]) == [failure]


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert WorkerFailure.of_error(KeyboardInterrupt(), rank=0).error == "KeyboardInterrupt"


def test_unset_fields_stay_out_of_the_file_and_unknown_keys_are_ignored() -> None:
    failure = WorkerFailure(rank=None, node="host-b", exit_code=7)
    assert failure.to_json() == {"node": "host-b", "exit_code": 7}
    assert WorkerFailure.from_json({"rank": 2, "signal": "SIGKILL", "pid": 123}) == WorkerFailure(
        rank=2, signal="SIGKILL"
    )
    with pytest.raises(ValueError, match="JSON object"):
        WorkerFailure.from_json([1, 2])  # type: ignore[arg-type]  # what a broken file may hold


def test_unreadable_files_are_passed_over(tmp_path: Path) -> None:
    good, broken, listed = tmp_path / "good.json", tmp_path / "broken.json", tmp_path / "list.json"
    good.write_text(json.dumps({"rank": 1, "error": "OSError: disk", "timestamp": 2.5}))
    broken.write_text("{half a rec")
    listed.write_text("[1]")
    paths = [str(good), str(broken), str(listed), str(tmp_path / "missing.json")]
    assert read_failures(paths) == [WorkerFailure(rank=1, error="OSError: disk", timestamp=2.5)]
    remove_failures(paths)
    assert sorted(os.listdir(tmp_path)) == []


def test_worker_records_under_a_prefix_are_read_and_removed(tmp_path: Path) -> None:
    prefix = worker_failure_prefix(str(tmp_path / "result.json"))
    assert prefix == str(tmp_path / "result.json.failure")
    for rank in (0, 1):
        write_failure(worker_failure_file(prefix, rank), WorkerFailure(rank=rank, error=f"E{rank}: x"))
    (tmp_path / "result.json.failure.rank2.json.tmp").write_text("{")  # a worker killed mid-write
    (tmp_path / "result.json").write_text("{}")
    assert [f.rank for f in read_worker_failures(prefix)] == [0, 1]
    remove_worker_failures(prefix)
    assert os.listdir(tmp_path) == ["result.json"]


def test_record_worker_failure_writes_only_where_a_launcher_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAILURE_PREFIX_ENV, raising=False)
    record_worker_failure(RuntimeError("x"), rank=1)
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv(FAILURE_PREFIX_ENV, str(tmp_path / "r.failure"))
    record_worker_failure(RuntimeError("x"), rank=1)
    assert [(f.rank, f.error) for f in read_worker_failures(str(tmp_path / "r.failure"))] == [
        (1, "RuntimeError: x")
    ]


def test_agent_failure_file_is_named_by_node() -> None:
    assert agent_failure_file("/e/result.json", 2) == "/e/result.json.node2.failure.json"


# --- which failure is reported ---------------------------------------------------------------


def torch_rule(*failures: WorkerFailure) -> Optional[WorkerFailure]:
    """torchrun's: it stops survivors with SIGTERM, and its failures carry real times."""
    return primary_failure(failures, stop_signals=("SIGTERM",), stopped_last=False)


def horovod_rule(*failures: WorkerFailure) -> Optional[WorkerFailure]:
    """horovodrun's: stopped workers come last (its exits are ordered, not timed)."""
    return primary_failure(failures, stop_signals=STOP_SIGNALS, stopped_last=True)


RULES = (torch_rule, horovod_rule)


def test_a_recorded_error_wins_then_the_earliest_then_the_lowest_rank() -> None:
    late = WorkerFailure(rank=0, error="KeyError: 'x'", timestamp=20.0)
    early = WorkerFailure(rank=2, error="ValueError: boom", timestamp=10.0)
    tie = WorkerFailure(rank=1, error="ValueError: boom", timestamp=10.0)
    killed = WorkerFailure(rank=3, exit_code=-9, signal="SIGKILL", timestamp=1.0)
    for rule in RULES:
        assert rule(late, killed, early) is early
        assert rule(late, early, tie) is tie
        assert rule() is None


def test_a_kill_by_another_signal_outranks_exits_and_stops() -> None:
    exited = WorkerFailure(rank=0, exit_code=1, timestamp=1.0)
    stopped = WorkerFailure(rank=1, exit_code=-15, signal="SIGTERM", timestamp=0.5)
    killed = WorkerFailure(rank=2, exit_code=-9, signal="SIGKILL", timestamp=3.0)
    for rule in RULES:
        assert rule(exited, stopped, killed) is killed


def test_stopped_workers_rank_with_exits_by_time_or_after_them() -> None:
    exited = WorkerFailure(rank=0, exit_code=1, timestamp=1.0)
    stopped = WorkerFailure(rank=1, exit_code=143, signal="SIGTERM", timestamp=0.0)
    interrupted = WorkerFailure(rank=2, exit_code=130, signal="SIGINT", timestamp=0.0)
    assert torch_rule(exited, stopped) is stopped
    assert horovod_rule(exited, stopped) is exited
    # torchrun stops with SIGTERM only: a SIGINT there is a kill from outside.
    assert torch_rule(exited, interrupted) is interrupted
    assert horovod_rule(exited, interrupted) is exited
    assert horovod_rule(interrupted, stopped) is stopped  # both stopped at once: the lower rank


def test_ranks_that_are_not_numbers_keep_the_order_given() -> None:
    first = WorkerFailure(rank="[[1,1],0]", exit_code=1, timestamp=0.0)
    second = WorkerFailure(rank="[[1,1],1]", exit_code=1, timestamp=0.0)
    assert horovod_rule(first, second) is first


# --- what is said about it -------------------------------------------------------------------


def test_descriptions_and_summaries() -> None:
    raised = WorkerFailure(rank=3, error="ValueError: x", exit_code=1)
    recorded = WorkerFailure(rank=1, error="ValueError: boom")
    killed = WorkerFailure(rank=1, exit_code=-9, signal="SIGKILL")
    exited = WorkerFailure(rank="0", exit_code=3)
    assert [f.describe() for f in (raised, recorded, killed, exited)] == [
        "rank 3: ValueError: x",
        "rank 1: ValueError: boom",
        "rank 1: killed by SIGKILL",
        "rank 0: exited with code 3",
    ]
    assert raised.summary(" on host-a") == (
        "det-lite: worker rank 3 on host-a failed (exit code 1); its error is above; "
        "stopped the other workers"
    )
    assert recorded.summary() == (
        "det-lite: worker rank 1 failed; its error is above; stopped the other workers"
    )
    assert killed.summary() == "det-lite: worker rank 1 was killed by SIGKILL; stopped the other workers"
    assert exited.summary() == "det-lite: worker rank 0 exited with code 3; stopped the other workers"


def test_a_failure_of_no_worker_is_named_by_its_agent_and_node() -> None:
    agent = WorkerFailure(rank=None, node="host-b", error="RuntimeError: rendezvous timed out")
    assert agent.describe("torchrun agent") == "torchrun agent on host-b: RuntimeError: rendezvous timed out"
    assert WorkerFailure(rank=None, node="host-c", exit_code=255).describe("torchrun agent") == (
        "torchrun agent on host-c: exited with code 255"
    )
    assert WorkerFailure(rank=None, error="RuntimeError: no ssh").describe("horovodrun") == (
        "horovodrun: RuntimeError: no ssh"
    )


def test_exit_codes_and_signal_names() -> None:
    assert stopped_exit_code(signal.SIGTERM) == 143
    assert stopped_exit_code(2) == 130
    assert signal_name(9) == "SIGKILL"
    assert signal_name(0) is None
    assert signal_name(10_000) is None
