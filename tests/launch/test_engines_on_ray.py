"""Engines own their rendezvous (issue 41): the Ray executor reaches an engine only through its
plug-in (``launch/_engines.py``), rank 0's slot actor hosts the engine's rendezvous on its own
node on a port it bound itself and holds, and interface variables are read on each node."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import os
import urllib.error
import urllib.request

import psutil
import pytest

from determined_lite.config._plugins import ENGINES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY_MODULES = ("_ray.py", "_ray_slot.py", "_ray_cluster.py", "_ray_place.py", "_ray_data.py")


@pytest.mark.parametrize("module", RAY_MODULES)
def test_the_ray_executor_names_no_engine(module):
    """No engine if-chain: the Ray executor's modules hold no engine's name and import no
    engine's module; a new engine is its module and its registry line."""
    path = os.path.join(REPO, "determined_lite", "launch", module)
    with open(path) as f:
        tree = ast.parse(f.read())
    names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not names & set(ENGINES), f"{module} names engines {sorted(names & set(ENGINES))}"
    engine_modules = {r.launcher_module for r in ENGINES.values()} | {
        r.context_module for r in ENGINES.values()
    }
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & engine_modules


def test_interface_variables_are_the_nodes_own():
    """A node's own values win; else the interface that holds the node's address."""
    from determined_lite.launch._engines import engine
    from determined_lite.launch._hosts import interface_of, loopback_interface

    lo = loopback_interface()
    assert lo is not None and interface_of("127.0.0.1") == lo
    torch_engine, horovod = engine("torch"), engine("horovod")
    assert torch_engine.node_env("127.0.0.1", {}) == {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo}
    assert torch_engine.node_env("127.0.0.1", {"NCCL_SOCKET_IFNAME": "ib0"}) == {
        "GLOO_SOCKET_IFNAME": lo,
        "NCCL_SOCKET_IFNAME": "ib0",
    }
    assert horovod.node_env("127.0.0.1", {}) == {"HOROVOD_GLOO_IFACE": lo, "NCCL_SOCKET_IFNAME": lo}
    assert torch_engine.node_env("192.0.2.1", {}) == {}  # no interface holds it: nothing set
    assert engine("single").node_env("127.0.0.1", {}) == {}


# --- on a real two-node Ray cluster -----------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    import ray

    from tests.ray_cluster import TestCluster

    test_cluster = TestCluster()
    try:
        ray.init(address=test_cluster.address, logging_level="ERROR", log_to_driver=False)
        yield test_cluster
    finally:
        test_cluster.shutdown()


def _gang(cluster, rank0_node):
    """Two slot actors, rank 0's on ``rank0_node`` and rank 1's on the other node; their slots."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from determined_lite.launch._ray_slot import SlotWorker
    from determined_lite.launch._slots import assign_ranks

    nodes = [cluster.cluster.head_node, cluster.worker_node]
    order = [rank0_node] + [n for n in nodes if n is not rank0_node]
    actor_cls = ray.remote(SlotWorker)
    actors = [
        actor_cls.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)
        ).remote()
        for n in order
    ]
    infos = ray.get([a.node.remote() for a in actors])
    return actors, infos, assign_ranks(infos)


def _listener(port):
    """The pid of the process listening on TCP ``port``."""
    (pid,) = {c.pid for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port}
    return pid


def test_rank_0s_slot_hosts_the_torch_store_on_the_port_it_bound(cluster):
    import ray
    import torch.distributed as dist

    from determined_lite.launch._engines import engine

    actors, infos, slots = _gang(cluster, cluster.worker_node)
    try:
        assert slots[0].node_id == cluster.worker_node.node_id
        places = [dataclasses.asdict(s) for s in slots]
        meet = ray.get(actors[0].host_rendezvous.remote("torch", places))
        port = ray.get(actors[0].rendezvous_port.remote())
        assert meet == {
            "MASTER_ADDR": slots[0].ip,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }
        assert _listener(port) == infos[0]["pid"] != os.getpid()  # held by rank 0's actor
        client = dist.TCPStore(slots[0].ip, port, is_master=False, timeout=datetime.timedelta(seconds=30))
        client.set("k", "v")  # a live store there, as every rank joins it
        assert client.get("k") == b"v"
        env = engine("torch").rank_env(_spec(), slots, 1, meet)
        assert (env["RANK"], env["GROUP_RANK"], env["MASTER_PORT"]) == ("1", "1", str(port))
    finally:
        for actor in actors:
            ray.kill(actor)


def test_horovods_rendezvous_runs_on_rank_0s_node(cluster):
    """Not on the driver (this process, on the head node): on rank 0's node, by its actor."""
    import ray

    pytest.importorskip("horovod")
    actors, infos, slots = _gang(cluster, cluster.worker_node)
    try:
        places = [dataclasses.asdict(s) for s in slots]
        meet = ray.get(actors[0].host_rendezvous.remote("horovod", places))
        port = int(meet["HOROVOD_GLOO_RENDEZVOUS_PORT"])
        assert meet["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == slots[0].ip
        assert port == ray.get(actors[0].rendezvous_port.remote())
        assert _listener(port) == infos[0]["pid"] != os.getpid()
        # Horovod's server answers there (a key nobody put: 404 from its handler).
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://{slots[0].ip}:{port}/global/missing", timeout=30)
        assert missing.value.code == 404
    finally:
        for actor in actors:
            ray.kill(actor)


def _spec():
    from determined_lite.runtime._spec import WorkerSpec

    return WorkerSpec("m:T", "/ctx", {}, {}, "/r.json", {"batches": 1}, 0, {}, backend="torch", slots=2)
