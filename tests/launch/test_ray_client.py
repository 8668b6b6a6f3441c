"""A driver that joins the cluster as a Ray Client (``resources.ray.address: ray://HOST:PORT``,
issue 41 part 5): the executor's parts all go through Ray's API (the slot actors and their pipes,
the context archive in the object store, the placement group), the store stays with the driver,
so a 2-slot torch.distributed trial runs as it does with a GCS address. A real 2-node cluster
whose head serves Ray Client on a free port; ``$RAY_ADDRESS`` is unset, so only the config's
``ray://`` address leads to it."""

from __future__ import annotations

import socket

import pytest

from tests.cli_helpers import cli, describe
from tests.launch.test_ray_executor import (
    LINEAR,
    assert_closed_form,
    assert_no_traceback,
    placed_nodes,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def client_address(monkeypatch):
    """The head's Ray Client server waits 30 s by default for the server process it starts per
    client, which a loaded CI box can exceed (``Initialization failure from server``)."""
    from tests.ray_cluster import TestCluster

    monkeypatch.setenv("RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S", "300")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = TestCluster(client_port=port)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        yield f"ray://127.0.0.1:{port}"
    finally:
        cluster.shutdown()


def test_a_two_slot_trial_through_ray_client(tmp_path, client_address):
    changes = {
        "resources.ray.address": client_address,
        "resources.slots_per_trial": 2,
        "resources.distributed_backend": "torch",
    }
    proc = cli("experiment", "create", write_config(tmp_path, **changes), LINEAR, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert_no_traceback(output)
    (nodes,) = placed_nodes(output)
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes  # 1 CPU per node: one rank on each
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)
    (run,) = trial["runs"]
    assert run["executor"] == "ray" and run["host"].startswith("ray nodes "), run
