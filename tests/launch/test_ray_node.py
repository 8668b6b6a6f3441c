"""A 1-slot Ray run starts as a local one does (launch/_ray_node.py): its worker is forked on its
node by the node's warm fork server, named by the installation and the image, and gives exactly
what a plain process gives. A real 2-node Ray cluster in this process (head + 1 node, 1 CPU
each), its nodes' fork servers in this test's own runtime directory."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest
import yaml

from determined_lite.launch import _server_registry
from tests.cli_helpers import cli, describe
from tests.launch.test_forkserver_shared import MODEL_DEF

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The trial of test_forkserver_shared, writing its parent's command line where the test reads it.
FORKED = '            forked = b"_forkserver_serve" in f.read()\n'
PROBE = MODEL_DEF.replace(
    FORKED,
    "            parent = f.read()\n"
    '            forked = b"_forkserver_serve" in parent\n'
    '        probe = os.path.join(context.get_hparam("probe"), str(context.get_hparam("lr")))\n'
    '        with open(probe, "wb") as f:\n'
    "            f.write(parent)\n",
)
assert FORKED in MODEL_DEF


@pytest.fixture
def node_cluster(monkeypatch):
    """The cluster, its nodes' processes started with a runtime directory of this test's own (a
    short path: a socket's holds 108 bytes), so no other test's server serves them."""
    from tests.ray_cluster import TestCluster

    runtime = tempfile.mkdtemp(prefix="rn-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    cluster = TestCluster()
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    try:
        yield runtime
    finally:
        cluster.shutdown()
        shutil.rmtree(runtime, ignore_errors=True)


def _grid(tmp_path, name: str, env: dict, **searcher) -> tuple:
    """A 2-trial grid of 1-slot trials on Ray: each trial's last validation metrics, and the
    command line of each trial's parent process."""
    context, probe = tmp_path / "context", tmp_path / f"probe-{name}"
    context.mkdir(exist_ok=True)
    probe.mkdir()
    (context / "model_def.py").write_text(PROBE)
    config = {
        "name": name,
        "entrypoint": "model_def:Trial",
        "hyperparameters": {
            "global_batch_size": 8,
            "lr": {"type": "categorical", "vals": [0.01, 0.05]},
            "probe": str(probe),
        },
        "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 8}, **searcher},
        "resources": {"executor": "ray"},
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 5},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    home = str(tmp_path / f"home-{name}")
    env = dict(env, DET_LITE_HOME=home)
    cli("experiment", "create", str(path), str(context), env=env, check=True, timeout=400)
    trials = describe(1, home=home)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"] * 2
    metrics = {t["hparams"]["lr"]: t["validation_metrics"][-1]["metrics"] for t in trials}
    parents = {lr: (probe / str(lr)).read_bytes().split(b"\0") for lr in (0.01, 0.05)}
    return metrics, parents


def test_a_one_slot_trial_is_forked_by_its_nodes_server_and_equals_a_plain_start(tmp_path, node_cluster):
    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="0")  # the servers end with the node actors
    forked, parents = _grid(tmp_path, "forked", env)
    servers = {int(m.pop("server")) for m in forked.values()}
    assert len(servers) == 1 and 0 not in servers, servers  # both nodes of this machine: one server
    installation = f"fs-{_server_registry.server_key()}.sock"
    for cmdline in parents.values():  # python -u -m ..._forkserver_serve FD SOCKET IDLE_S
        assert cmdline[3] == b"determined_lite.launch._forkserver_serve", cmdline
        socket_path = cmdline[5].decode()
        assert os.path.dirname(os.path.dirname(socket_path)) == node_cluster  # the nodes' own
        assert os.path.basename(socket_path) != installation  # not a local runner's server
    plain, parents = _grid(tmp_path, "plain", dict(env, DET_LITE_FORKSERVER="0"))
    assert {int(m.pop("server")) for m in plain.values()} == {0}
    assert all(b"_forkserver_serve" not in b"".join(p) for p in parents.values())
    assert forked == plain  # bit-exact: every metric of both trials


def test_the_node_actors_and_their_servers_outlive_the_experiment_until_idle(tmp_path, node_cluster):
    """A second experiment's runs are forked by the node server the first one warmed (its node
    actor outlived it), with the same metrics; once idle, the actors end and their server too."""
    import psutil
    import ray

    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="30")
    first, _ = _grid(tmp_path, "first", env)
    second, _ = _grid(tmp_path, "second", env)
    servers = {int(m.pop("server")) for m in first.values()}
    assert len(servers) == 1 and 0 not in servers, servers
    assert {int(m.pop("server")) for m in second.values()} == servers  # warm: the same server
    assert first == second
    ray.init(logging_level="WARNING")  # $RAY_ADDRESS: the fixture's cluster
    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert len([n for n in named if n.startswith("det-lite-node-")]) == 2, named  # one per node
    (server,) = servers
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
        if not named and not psutil.pid_exists(server):
            break
        time.sleep(1)
    assert not named and not psutil.pid_exists(server), (named, server)


def test_one_trial_after_another_runs_in_one_placement_group(tmp_path, node_cluster):
    """The second trial of a grid run one at a time starts in the placement group the first
    one's run held (launch/_ray_groups.py), with the same metrics as when each run has a group
    of its own (two at a time)."""
    import ray

    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="0")
    serial, _ = _grid(tmp_path, "serial", env, max_concurrent_trials=1)
    ray.init(logging_level="WARNING")  # $RAY_ADDRESS: the fixture's cluster
    groups = ray.util.placement_group_table()
    assert len(groups) == 1, groups  # one group for both runs (none before: a cluster of its own)
    parallel, _ = _grid(tmp_path, "parallel", env)
    assert len(ray.util.placement_group_table()) == 3  # two at a time: a group each
    for metrics in (serial, parallel):
        assert all(m.pop("server") for m in metrics.values())  # forked (by each experiment's server)
    assert serial == parallel
