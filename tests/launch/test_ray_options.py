"""The Ray executor's pure parts (no cluster): ``resources.ray`` read from a config, ranks node by
node, the engines' environments, and ``create`` refusing a cluster it cannot reach."""

from __future__ import annotations

import json
import os
import socket

import pytest

from determined_lite.launch._horovodrun import rank_env as horovod_env
from determined_lite.launch._ray_cluster import RayOptions, connect_failure
from determined_lite.launch._ray_place import shape
from determined_lite.launch._slots import assign_ranks, gpu_env
from determined_lite.launch._torchrun import rank_env as torch_env
from tests.cli_helpers import cli, write_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")


def test_options_from_config_and_actor_options():
    section = {"placement": "spread", "resources_per_slot": {"CPU": 2, "GPU": 1, "pool_a": 1}}
    options = RayOptions.from_config({"resources": {"ray": section}})
    assert options.placement == "spread" and options.address is None
    assert options.actor_options() == {
        "num_cpus": 2.0,
        "num_gpus": 1.0,
        "max_concurrency": 4,
        "resources": {"pool_a": 1.0},
    }
    assert RayOptions.from_config({}).resources_per_slot == {"CPU": 1.0}
    assert RayOptions.from_config({}).placement_timeout == 600.0
    timeout = RayOptions.from_config({"resources": {"ray": {"placement_timeout": 30}}}).placement_timeout
    assert timeout == 30.0


def test_a_connect_failure_is_one_line_that_says_why():
    server = "Traceback (most recent call last):\n  File \"proxier.py\", line 770\nRuntimeError: Proxy failed"
    client_error = ConnectionAbortedError(f"Initialization failure from server:\n{server}\n")
    assert connect_failure(client_error) == "Initialization failure from server: RuntimeError: Proxy failed"
    assert connect_failure(ConnectionError("nothing answers at 10.0.0.1:6379\nmore")) == (
        "nothing answers at 10.0.0.1:6379"
    )
    assert connect_failure(TimeoutError()) == "TimeoutError"


def test_a_gang_is_named_by_its_resource_shape():
    assert shape({"CPU": 1.0}) == "{CPU: 1}"
    assert shape({"GPU": 1.0, "CPU": 0.5}) == "{GPU: 1, CPU: 0.5}"


def test_a_placement_timeout_that_is_not_positive_is_one_line(tmp_path):
    path = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{"resources.executor": "ray", "resources.ray.placement_timeout": 0},
    )
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    expected = f"det-lite: error: {path}: resources.ray.placement_timeout: expected a value > 0, got 0\n"
    assert proc.stderr == expected


def _info(node: str, port: int) -> dict:
    return {"node_id": node, "ip": f"10.0.0.{ord(node[-1]) - 96}", "host": node, "port": port}


def test_ranks_go_node_by_node_with_torchrun_and_horovodrun_environments():
    # bundles 0..3 landed on nodes a, b, a, b: ranks 0, 1 on a and 2, 3 on b
    infos = [_info("node-a", 1000), _info("node-b", 2000), _info("node-a", 1001), _info("node-b", 2001)]
    slots = assign_ranks(infos)
    assert [(s.actor, s.node_id, s.local_rank, s.node_index) for s in slots] == [
        (0, "node-a", 0, 0),
        (2, "node-a", 1, 0),
        (1, "node-b", 0, 1),
        (3, "node-b", 1, 1),
    ]
    env = torch_env(slots, 3)
    assert env == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
    }  # MASTER_ADDR/PORT: published by the store rank 0's slot hosts (test_engines_on_ray.py)
    assert horovod_env(slots, 2) == {
        "HOROVOD_HOSTNAME": "node1",
        "HOROVOD_RANK": "2",
        "HOROVOD_SIZE": "4",
        "HOROVOD_LOCAL_RANK": "0",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
    }


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_create_refuses_a_cluster_it_cannot_reach(tmp_path, scheme):
    """A GCS address (``$RAY_ADDRESS``) or a Ray Client address (``resources.ray.address:
    ray://...``) where nothing listens: one line at once (Ray Client alone retries for 30 s and
    prints a warning of its own)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"{scheme}127.0.0.1:{port}"
    changes = {"resources.executor": "ray"}
    if scheme:
        changes["resources.ray.address"] = address
    path = write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, **changes)
    env = dict(os.environ, RAY_ADDRESS=address)
    proc = cli("experiment", "create", path, LINEAR, env=env, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"det-lite: error: {path}: resources.executor: ray: cannot connect"), line
    assert f"cannot connect to a Ray cluster: nothing answers at {address} (" in line
    assert json.loads(cli("experiment", "list", "--json", check=True).stdout) == []


def test_the_ranks_of_a_node_share_the_trials_gpus_there():
    """Bundles 0..2 with one GPU each: two on node a (GPUs 3 and 1), one on node b (GPU 0). The
    ranks on a see both of a's GPUs, local rank r's own at index r; rank 2 sees b's only."""
    infos = [dict(_info("node-a", 1000), gpus=["3"]), dict(_info("node-b", 2000), gpus=["0"])]
    infos.append(dict(_info("node-a", 1001), gpus=["1"]))
    slots = assign_ranks(infos)
    assert [gpu_env(slots, r) for r in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "3,1"},
        {"CUDA_VISIBLE_DEVICES": "3,1"},
        {"CUDA_VISIBLE_DEVICES": "0"},
    ]
    assert [torch_env(slots, r)["LOCAL_RANK"] for r in range(3)] == ["0", "1", "0"]
    assert gpu_env(assign_ranks([_info("node-a", 1000)]), 0) == {}  # no GPU: Ray's view stays


def test_held_placement_groups_go_to_the_next_run_of_their_shape_until_they_expire():
    from determined_lite.launch._ray_groups import HeldGroups

    now = [0.0]
    held = HeldGroups(hold_s=5.0, clock=lambda: now[0])
    one, other, gang = object(), object(), object()
    held.give(1, one)
    held.give(1, other)
    held.give(2, gang)
    assert held.held_slots() == 4  # 1 + 1 + 2 bundles
    assert held.take(1) is other and held.take(1) is one and held.take(1) is None
    held.give(1, one)
    now[0] = 4.9
    assert held.held_slots() == 3  # still held
    now[0] = 5.1
    assert held.take(2) is None and held.take(1) is None and held.held_slots() == 0  # removed


def test_a_node_actor_is_named_by_its_node_and_the_jobs_runtime_environment():
    from determined_lite.launch._ray_node import actor_name

    plain = actor_name("n1", "{}")
    assert plain == actor_name("n1", "{}") and plain.startswith("det-lite-node-n1-")
    assert actor_name("n2", "{}") != plain
    assert actor_name("n1", '{"env_vars": {"A": "1"}}') != plain  # a job with other variables: another actor
