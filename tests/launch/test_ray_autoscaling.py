"""A gang larger than the cluster waits as a pending placement group, Ray's own autoscaler adds
the node it needs, and the trial completes (issue 41, part 4). The cluster is a head of 1 CPU
whose autoscaler runs Ray's fake multi-node provider with one worker node type of 1 CPU (min 0,
max 1): the node is added by the autoscaler reading the placement group's demand, as KubeRay's or
``ray up``'s would, not by the test (``tests/ray_autoscaling.py`` says why not Ray's
``AutoscalingCluster``)."""

from __future__ import annotations

import pytest

from tests.cli_helpers import cli, describe
from tests.launch.test_ray_executor import (
    LINEAR,
    assert_closed_form,
    assert_no_traceback,
    placed_nodes,
    write_config,
)
from tests.ray_autoscaling import AutoscalingHead
from tests.ray_cluster import OBJECT_STORE_BYTES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORKER_TYPES = {"cpu_1": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 1}}
WAITING = "det-lite: trial 1 waiting for 2 × {CPU: 1} on the Ray cluster"


@pytest.fixture
def autoscaling(tmp_path_factory, monkeypatch):
    head = AutoscalingHead(str(tmp_path_factory.mktemp("autoscaler")), 1, WORKER_TYPES, OBJECT_STORE_BYTES)
    try:
        head.wait_started()
        monkeypatch.setenv("RAY_ADDRESS", head.address)
        yield head
    finally:
        head.stop()


def _node_cpus(head: AutoscalingHead) -> list:
    import ray

    ray.init(address=head.address, log_to_driver=False)
    try:
        return sorted(head.alive_cpus())
    finally:
        ray.shutdown()


def test_the_autoscaler_adds_the_node_a_waiting_gang_needs(tmp_path, autoscaling):
    assert _node_cpus(autoscaling) == [1.0]  # the head alone: 1 slot, the trial needs 2
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "torch"}
    proc = cli("experiment", "create", write_config(tmp_path, **two_slots), LINEAR, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output + autoscaling.output()
    assert output.count(WAITING) == 1, output  # it waited for the node, said so once
    assert_no_traceback(output)
    (nodes,) = placed_nodes(output)  # placed once (the fake nodes' ids share 12 first digits)
    assert len(nodes) == 2, nodes
    # the autoscaler added one node of its type: only with it do two 1-CPU bundles fit
    assert _node_cpus(autoscaling) == [1.0, 1.0]
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)
