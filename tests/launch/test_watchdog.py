"""The stall watchdog (issue 16, item 3): a worker that makes no progress for
``$DET_LITE_STALL_TIMEOUT`` seconds ends the trial on both engines and on one slot, and the
message names the stuck rank and the hook it entered last. Before, a hung Horovod rank hung the
experiment forever, and torch.distributed failed only after 30 minutes, blaming rank 0."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from determined_lite.launch._watchdog import (
    Heartbeat,
    StallWatchdog,
    heartbeat_file,
    read_heartbeats,
    stall_timeout,
)
from tests.cli_helpers import REPO, cli, describe, write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")


def test_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_LITE_STALL_TIMEOUT", raising=False)
    assert stall_timeout() == 1200.0
    monkeypatch.setenv("DET_LITE_STALL_TIMEOUT", "0")
    assert stall_timeout() is None
    monkeypatch.setenv("DET_LITE_STALL_TIMEOUT", "2.5")
    assert stall_timeout() == 2.5
    monkeypatch.setenv("DET_LITE_STALL_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=r"\$DET_LITE_STALL_TIMEOUT must be a number of seconds"):
        stall_timeout()


@pytest.mark.slow
def test_the_oldest_heartbeat_is_named(tmp_path) -> None:
    result = str(tmp_path / "result.json")
    now = time.time()
    # Rank 1 is stuck in train_batch of batch 3; rank 0 went on to backward (position 11) and
    # waits for it there, although it entered backward a moment before rank 1 entered train_batch.
    stuck = Heartbeat(rank=1, hook="train_batch", batch=3, since=now - 20, position=10)
    with open(heartbeat_file(result, 1), "w") as f:
        json.dump(dataclasses.asdict(stuck), f)
    said: list = []
    own = Heartbeat(rank=0, hook="backward", batch=3, since=now - 20.001, position=11)
    watchdog = StallWatchdog(own, result, timeout=1.0, on_stall=said.append).start()
    deadline = time.monotonic() + budget(10)
    while not said and time.monotonic() < deadline:
        time.sleep(0.05)
    watchdog.stop()
    assert len(said) == 1
    assert said[0].startswith(f"stalled: {stuck.describe()} made no progress for 2")
    assert "rank 1 in train_batch (batch 3)" in said[0] and "$DET_LITE_STALL_TIMEOUT=1" in said[0]
    assert {b.rank for b in read_heartbeats(result)} == {0, 1}  # it wrote its own


@pytest.mark.slow
def test_a_progressing_worker_is_left_alone(tmp_path) -> None:
    beat = Heartbeat(rank=0)
    said = []
    watchdog = StallWatchdog(beat, str(tmp_path / "result.json"), timeout=0.5, on_stall=said.append).start()
    for batch in range(30):
        beat.enter("train_batch", batch)
        time.sleep(0.05)
    watchdog.stop()
    assert said == []


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "slots, backend, hang_rank",
    [(1, "torch", 0), (2, "torch", 1), (2, "horovod", 1)],
    ids=["1-slot", "torch-rank1", "horovod-rank1"],
)
def test_a_hung_rank_ends_the_trial_and_is_named(tmp_path, slots, backend, hang_rank) -> None:
    path = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        max_restarts=0,
        resources={"slots_per_trial": slots, "distributed_backend": backend},
        **{"hyperparameters.hang_at": 3, "hyperparameters.hang_rank": hang_rank},
    )
    # 10 s: the watchdog also times a worker's setup (imports, the process group), which took
    # over 4 s on a loaded 2-core machine and named the wrong rank.
    proc = cli("experiment", "create", path, LINEAR, env={**os.environ, "DET_LITE_STALL_TIMEOUT": "10"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR"
    logs = cli("trial", "logs", str(trial["id"]), check=True).stdout
    assert f"stalled: rank {hang_rank} in train_batch (batch 3) made no progress for" in logs, logs
    failed = f"trial {trial['id']} failed: rank {hang_rank}: StallError: stalled: rank {hang_rank}"
    assert failed in logs, logs
