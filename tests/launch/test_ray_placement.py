"""A gang on a Ray cluster that does not fit now waits as a pending placement group (the demand a
Ray autoscaler adds nodes for) and runs once a node is added; one that never fits fails with one
line after ``resources.ray.placement_timeout``; experiments sharing a cluster count only what Ray
says is free. A real Ray cluster started in this process with one 1-CPU node; the test adds the
node an autoscaler would (``ray.cluster_utils.Cluster.add_node``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import List

import pytest

from tests.cli_helpers import cli, describe
from tests.launch.test_ray_executor import LINEAR, REPO, assert_closed_form, assert_no_traceback, write_config
from tests.ray_cluster import OBJECT_STORE_BYTES
from tests.timing import budget

# xdist_group: the Ray modules run on one worker, one cluster at a time (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("ray")]

WAITING = "det-lite: trial 1 waiting for 2 × {CPU: 1} on the Ray cluster"


@pytest.fixture
def one_node(monkeypatch):
    from tests.ray_cluster import TestCluster

    cluster = TestCluster(worker_node=False)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _read(proc: subprocess.Popen, lines: List[str]) -> threading.Thread:
    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _said(lines: List[str], text: str) -> bool:
    return any(text in line for line in lines)


def test_a_gang_waits_for_a_node_then_completes(tmp_path, one_node):
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "torch"}
    path = write_config(tmp_path, **two_slots)
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    lines: List[str] = []
    reader = _read(proc, lines)
    try:
        deadline = time.monotonic() + budget(90)
        while not _said(lines, WAITING) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _said(lines, WAITING), "\n".join(lines)
        assert not _said(lines, "placed on the Ray cluster")
        one_node.add_node()  # what an autoscaler does for the pending placement group
        proc.wait(timeout=budget(300))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    output = "\n".join(lines)
    assert proc.returncode == 0, output
    assert output.count(WAITING) == 1, output
    assert_no_traceback(output)
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)


def test_a_gang_that_never_fits_fails_with_one_line(tmp_path, one_node):
    changes = {
        "resources.slots_per_trial": 2,
        "resources.distributed_backend": "torch",
        "resources.ray.placement_timeout": 3,
    }
    proc = cli("experiment", "create", write_config(tmp_path, **changes), LINEAR, timeout=budget(120))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert_no_traceback(output)
    line = (
        "det-lite: trial 1 needs 2 × {CPU: 1}, but after 3 s (resources.ray.placement_timeout) "
        "the Ray cluster's nodes hold 1 in all"
    )
    assert output.count(line) == 1, output
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0, trial


def test_experiments_sharing_a_cluster_count_only_what_is_free(one_node):
    """Another experiment's gang (a placement group of its own) holds half the node: this
    executor counts the half Ray says is free, not the whole node."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from determined_lite.launch._ray import RayExecutor

    quarter = {"executor": "ray", "slots_per_trial": 1, "ray": {"resources_per_slot": {"CPU": 0.25}}}
    executor = RayExecutor({"resources": quarter})
    assert executor.capacity() == 4 and executor.total() == 4
    other = placement_group([{"CPU": 0.5}])
    assert other.wait(budget(30))
    try:
        deadline = time.monotonic() + budget(30)
        while executor.capacity() != 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # Ray's view of what is available follows in a moment
        assert executor.capacity() == 2
        assert executor.total() == 4  # all the cluster's slots, free or not
    finally:
        remove_placement_group(other)
        assert ray.is_initialized()


# --- GPUs (Ray's declared resources: no GPU needed) ---------------------------------------------


def test_the_ranks_of_a_trial_share_its_gpus_and_trials_get_disjoint_ones(tmp_path, one_node):
    """A node that declares 4 GPUs and a grid of two 2-slot trials of {CPU: 1, GPU: 1} at once:
    both ranks of a trial see the trial's two GPUs (local rank r uses device r), and the two
    trials' GPUs are disjoint."""
    one_node.cluster.add_node(num_cpus=4, num_gpus=4, object_store_memory=OBJECT_STORE_BYTES)
    one_node.cluster.wait_for_nodes()
    seen = tmp_path / "seen"
    seen.mkdir()
    changes = {
        "resources.slots_per_trial": 2,
        "resources.distributed_backend": "torch",
        "resources.ray.resources_per_slot": {"CPU": 1, "GPU": 1},
        "searcher.max_concurrent_trials": 2,
        "searcher.name": "grid",
        "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
        "hyperparameters.devices_dir": str(seen),
        "hyperparameters.sleep_s": 0.5,  # the two trials overlap
    }
    proc = cli("experiment", "create", write_config(tmp_path, **changes), LINEAR, timeout=budget(400))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads((seen / name).read_text()) for name in sorted(os.listdir(seen))]
    by_trial: dict = {}
    for r in records:
        by_trial.setdefault(r["trial"], {})[r["rank"]] = r
    assert sorted(by_trial) == [1, 2]
    held = []
    for ranks in by_trial.values():
        assert sorted(ranks) == [0, 1] and [ranks[r]["local_rank"] for r in (0, 1)] == [0, 1]
        cuda = ranks[0]["cuda"]
        assert ranks[1]["cuda"] == cuda and len(set(cuda.split(","))) == 2, ranks
        held.append(set(cuda.split(",")))
    assert not held[0] & held[1] and held[0] | held[1] <= {"0", "1", "2", "3"}, held
    trials = describe(1)["trials"]
    assert len(trials) == 2
    for t in trials:
        assert t["state"] == "COMPLETED"
        assert_closed_form(t, t["hparams"]["lr"])
