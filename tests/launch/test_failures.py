"""The launchers' shared failure protocol: the failure result keeps what the chief reported."""

from __future__ import annotations

import sys
from pathlib import Path

from determined_lite.launch import WorkerResult, worker_command
from determined_lite.launch._failures import write_failure_result


def test_failure_result_keeps_the_chiefs_report(tmp_path: Path) -> None:
    path = str(tmp_path / "result.json")
    WorkerResult(status="completed", total_batches=12, best_validation=0.25).save(path)
    write_failure_result(path, "rank 1: RuntimeError: boom")
    result = WorkerResult.load(path)
    assert (result.status, result.error) == ("error", "rank 1: RuntimeError: boom")
    assert (result.total_batches, result.best_validation) == (12, 0.25)


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
