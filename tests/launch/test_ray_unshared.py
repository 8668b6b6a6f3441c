"""``resources.executor: ray`` on a cluster whose second node shares nothing with the driver but
the image and the checkpoint storage (issue 41): that node runs in its own mount namespace with
an empty tmpfs over the driver's ``$DET_LITE_HOME`` and the experiment's directory
(``tests/ray_blind_node.py``), checkpoints go to moto's S3 server on loopback. Where mount
namespaces are unavailable that case is skipped saying why, and the ``audit`` case (a normal
second node whose processes record every path they open under the driver's home) still runs."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from tests import ray_cluster
from tests.cli_helpers import cli, describe, pause_foreground, wait_for_batches
from tests.cloud_storage import linear_config
from tests.experiment.test_s3_storage import BUCKET, PREFIX, S3Server, s3, storage  # noqa: F401
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss
from tests.launch.test_ray_executor import LINEAR, assert_no_traceback
from tests.launch.test_ray_executor import _assert_uninterrupted as assert_uninterrupted
from tests.ray_blind_node import (
    BlindNode,
    audit_env,
    namespaces_unavailable,
    read_audit,
    write_audit,
)
from tests.timing import budget

# xdist_group: the Ray modules run on one worker, one cluster at a time (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("ray")]


def assert_closed_form(trial: dict, lr: float, w0: float = 0.0) -> None:
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    for v in trial["validation_metrics"]:
        w = closed_form(lr, v["total_batches"], batch_size=2, n=8, w0=w0)[-1]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


def placed_nodes(output: str) -> list:
    lines = [line for line in output.splitlines() if "placed on the Ray cluster" in line]
    return [re.findall(r"rank \d+ on \S+ \(node (\w+)\)", line) for line in lines]


@dataclasses.dataclass
class Split:
    """The started cluster: a head (the driver's machine) and a second node that must not use
    the driver's files, which a test may lose and replace."""

    mode: str
    cluster: ray_cluster.TestCluster
    log: str  # the audit log of the second node's processes
    env: Dict[str, str]  # the driver's environment (the audit's site on PYTHONPATH)
    experiment_dir: str
    hidden: List[str]  # what the blind node does not see
    node_env: Dict[str, str]
    node: Any = None  # the BlindNode, or the cluster's node
    node_id: str = ""

    def add_node(self) -> None:
        import ray

        ray.init(address=self.cluster.address, log_to_driver=False)
        try:
            if self.mode == "mount-namespace":
                store = ray_cluster.OBJECT_STORE_BYTES
                self.node = BlindNode(
                    self.cluster.address, self.hidden, self.node_env, store, self.log + ".node"
                )
                self.node_id = self.node.node_id
            else:
                self.node = self.cluster.add_node(env=self.node_env)
                self.node_id = self.node.node_id
        finally:
            ray.shutdown()

    def remove_node(self) -> None:
        if self.node is None:
            return
        if self.mode == "mount-namespace":
            self.node.stop()
        else:
            self.cluster.remove_node(self.node)
        self.node = None


def create_across_both(tmp_path, bucket: dict, split: Split, **changes: Any) -> str:
    """``experiment create`` of the linear trial on 2 slots with torch.distributed (and
    ``changes``) on ``split``'s cluster: its output, once it succeeded with no traceback and one
    rank on each node."""
    two_slots = {
        "resources.executor": "ray",
        "resources.slots_per_trial": 2,
        "resources.distributed_backend": "torch",
        **changes,
    }
    config = linear_config(tmp_path, bucket, **two_slots)
    proc = cli("experiment", "create", config, split.experiment_dir, env=split.env, timeout=500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert_no_traceback(out)
    (nodes,) = placed_nodes(out)
    assert split.node_id[:12] in nodes and len(set(nodes)) == 2, (split.node_id, nodes)
    return out


@pytest.fixture(params=["mount-namespace", "audit"])
def split_cluster(request, tmp_path, tmp_path_factory, _det_lite_home, monkeypatch):
    """A head (the driver's machine) and a second node that must not use the driver's files."""
    home = str(_det_lite_home)
    os.makedirs(home, exist_ok=True)
    experiment_dir = tmp_path / "experiment"  # the config and the context: not on the node
    shutil.copytree(LINEAR, experiment_dir)
    site = write_audit(str(tmp_path_factory.mktemp("audit-site")))
    log = str(tmp_path_factory.mktemp("audit-log") / "opens.log")
    env = audit_env(site, home, log)
    if request.param == "mount-namespace":
        why = namespaces_unavailable()
        if why:
            print(f"SKIPPED: no mount namespace for the node: {why}")
            pytest.skip(f"no mount namespace for the node: {why}")
    cluster = ray_cluster.TestCluster(worker_node=False)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)  # this cluster, never another on the machine
    driver_env = dict(os.environ, PYTHONPATH=env["PYTHONPATH"])  # the audit's site, not its root
    hidden = [home, str(experiment_dir)]
    split = Split(request.param, cluster, log, driver_env, str(experiment_dir), hidden, env)
    try:
        split.add_node()
        yield split
    finally:
        if split.mode == "mount-namespace":
            split.remove_node()
        cluster.shutdown()


def test_nothing_shared_but_the_image_and_the_storage(tmp_path, s3, split_cluster):  # noqa: F811
    """A 2-slot torch.distributed trial (one rank on each node) and a 2-trial grid (a trial on
    each node) end with their closed-form weights, every checkpoint in the bucket, and no
    process of the second node opened anything under the driver's home."""
    node_id, log, env, experiment_dir = (
        split_cluster.node_id,
        split_cluster.log,
        split_cluster.env,
        split_cluster.experiment_dir,
    )
    bucket = storage(s3)
    create_across_both(tmp_path, bucket, split_cluster)
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    assert_closed_form(trial, 0.01)
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 12

    grid = {
        "resources.executor": "ray",
        "searcher": {
            "name": "grid",
            "metric": "val_loss",
            "max_length": {"batches": 12},
            "max_concurrent_trials": 2,
        },
        "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
    }
    config = linear_config(tmp_path, bucket, **grid)
    proc = cli("experiment", "create", config, experiment_dir, env=env, timeout=500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert_no_traceback(out)
    trials = describe(2)["trials"]
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.02]
    for t in trials:
        assert t["state"] == "COMPLETED"
        assert_closed_form(t, t["hparams"]["lr"])
    assert any(node_id[:12] in n for n in placed_nodes(out)), out

    registered = {c["uuid"] for t in [trial, *trials] for c in t["checkpoints"]}
    assert len(registered) == 3 and registered == s3.uuids()  # every checkpoint, and only they
    for uuid in registered:
        assert f"{PREFIX}/{uuid}/metadata.json" in s3.keys()
    seen = read_audit(log)
    assert seen["opened"] == [], seen["opened"]
    assert len(seen["worker"]) >= 2, seen  # the torch trial's rank and a grid trial ran there


# A slow 2-slot torch trial on Ray (one rank on the second node) that checkpoints every 4 of its
# 24 batches: time to pause it or lose a node after a checkpoint in the bucket.
SLOW_TWO_SLOT_TORCH = {
    "resources.executor": "ray",
    "resources.slots_per_trial": 2,
    "resources.distributed_backend": "torch",
    "hyperparameters.sleep_s": 0.2,
    "searcher.max_length": {"batches": 24},
    "min_checkpoint_period": {"batches": 4},
}

def test_pause_then_activate_stays_exact(tmp_path, s3, split_cluster):  # noqa: F811
    """A slow 2-slot torch trial (one rank on the second node, checkpoints in the bucket) is
    paused and activated: it ends with the uninterrupted run's weights and metrics, its
    checkpoints in the bucket and nothing of the driver's home opened on the second node."""
    keep = dict(storage(s3), save_trial_latest=10)  # the one it resumes from stays registered
    config = linear_config(tmp_path, keep, **SLOW_TWO_SLOT_TORCH)
    argv = [sys.executable, "-m", "determined_lite.cli", "experiment"]

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*argv, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=split_cluster.env
        )

    proc = start("create", config, split_cluster.experiment_dir)
    wait_for_batches(1, 6, proc, timeout=300)
    out = pause_foreground(1, proc)
    assert split_cluster.node_id[:12] in out, out  # a rank ran on the second node of this cluster
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "PAUSED" and 6 <= trial["total_batches"] < 24, trial

    proc = start("activate", "1")
    out, _ = proc.communicate(timeout=budget(400))
    assert proc.returncode == 0, out
    assert "from checkpoint" in out and split_cluster.node_id[:12] in out, out
    assert_no_traceback(out)
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0, trial
    assert_uninterrupted(trial)
    registered = {c["uuid"] for c in trial["checkpoints"]}
    assert len(registered) >= 2 and registered <= s3.uuids()
    # The nodes fetched the checkpoint they resumed from: the driver downloaded none of them.
    assert not [c["path"] for c in trial["checkpoints"] if os.path.exists(c["path"])]
    assert read_audit(split_cluster.log)["opened"] == []


def test_losing_the_second_node_resumes_exactly_from_the_bucket(tmp_path, s3, split_cluster):  # noqa: F811
    """A slow 2-slot torch trial with one rank on the second node loses that node after a
    checkpoint in the bucket; a node with the audit joins in its place and the trial resumes
    from the bucket's latest checkpoint: one restart, the uninterrupted run's weights and metrics,
    nothing of the driver's home opened. (The new node is not a second blind node: one failed to
    join the same cluster three times at load ~20, Ray's raylet having a fixed 30 s to register.)"""
    config = linear_config(tmp_path, storage(s3), **SLOW_TWO_SLOT_TORCH)
    argv = [
        sys.executable,
        "-m",
        "determined_lite.cli",
        "experiment",
        "create",
        config,
        split_cluster.experiment_dir,
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=split_cluster.env
    )
    wait_for_batches(1, 8, proc, timeout=300)  # a checkpoint at batch 4 or 8 is in the bucket
    split_cluster.remove_node()
    split_cluster.cluster.add_node(env=split_cluster.node_env)
    out, _ = proc.communicate(timeout=budget(400))
    assert proc.returncode == 0, out
    assert "was lost" in out, out
    assert_no_traceback(out)
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1, trial
    assert_uninterrupted(trial)
    registered = {c["uuid"] for c in trial["checkpoints"]}
    assert registered and registered <= s3.uuids()
    assert read_audit(split_cluster.log)["opened"] == []


def test_a_warm_start_from_the_bucket_on_the_second_node(tmp_path, s3, split_cluster):  # noqa: F811
    """``searcher.source_trial_id``: a 2-slot trial (one rank on the node that does not see the
    driver's home) starts from another experiment's checkpoint in the bucket, which the driver
    fetched: the nodes get it through Ray, and both ranks train on from its weight."""
    env, experiment_dir, bucket = split_cluster.env, split_cluster.experiment_dir, storage(s3)
    config = linear_config(tmp_path, bucket, **{"resources.executor": "ray"})
    cli("experiment", "create", config, experiment_dir, env=env, check=True, timeout=500)
    (source,) = describe(1)["trials"]
    w12 = closed_form(0.01, 12, batch_size=2, n=8)[-1]
    assert source["validation_metrics"][-1]["metrics"]["weight"] == pytest.approx(w12, rel=1e-12)
    create_across_both(tmp_path, bucket, split_cluster, **{"searcher.source_trial_id": source["id"]})
    (trial,) = describe(2)["trials"]
    assert trial["state"] == "COMPLETED"
    assert_closed_form(trial, 0.01, w0=w12)  # from the source's weight, not from 0
    assert read_audit(split_cluster.log)["opened"] == []
