"""A real multi-node Ray cluster in this process for the Ray executor's tests.

``ray.cluster_utils.Cluster``: a head and one more node, 1 CPU each, no dashboard, a small object
store. The fixture starts it and shuts down exactly what it started (never ``ray stop``, which
would stop every Ray process of the user). Workers of the nodes inherit this process's
environment (``PYTHONPATH`` included), as nodes started with ``ray start`` inherit their shell's.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator, Optional

OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's minimum is 75 MiB


class TestCluster:
    """The started cluster: its address, and nodes to add or remove during a test."""

    def __init__(self, worker_node: bool = True, client_port: Optional[int] = None) -> None:
        """``client_port``: the head also serves Ray Client (``ray://127.0.0.1:PORT``) there."""
        from ray.cluster_utils import Cluster

        head = {"num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE_BYTES}
        if client_port is not None:
            head["ray_client_server_port"] = client_port
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        self.worker_node = self.add_node() if worker_node else None
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def add_node(self, env: Optional[Dict[str, str]] = None) -> object:
        """A 1-CPU node; ``env``: environment its processes start with (e.g. another storage view)."""
        with _environment(env or {}):
            node = self.cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
        self.cluster.wait_for_nodes()
        return node

    def remove_node(self, node: object) -> None:
        self.cluster.remove_node(node)

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self.cluster.shutdown()


@contextlib.contextmanager
def _environment(env: Dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_shared: Optional[TestCluster] = None


def shared() -> TestCluster:
    """The session's 2-node cluster, started by the first test that asks for it: the tests that
    use it (``shared_ray_cluster``) run one after another, and after the last one
    ``tests/conftest.py`` stops it (one start instead of one per module)."""
    global _shared
    if _shared is None:
        _shared = TestCluster()
    return _shared


def stop_shared() -> None:
    """Shut the shared cluster down if it runs (a later :func:`shared` starts a new one)."""
    global _shared
    if _shared is not None:
        cluster, _shared = _shared, None
        cluster.shutdown()
