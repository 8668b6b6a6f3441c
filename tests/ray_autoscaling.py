"""A real Ray autoscaler on this machine for the Ray executor's tests (issue 41, part 4).

Ray's own ``ray.cluster_utils.AutoscalingCluster`` cannot be used here: its ``start`` and
``shutdown`` run ``ray stop --force``, which kills every Ray process of the machine (another
test's cluster, the user's), and it reads ``fake_multi_node/example.yaml``, which Ray's wheel does
not ship. :class:`AutoscalingHead` does what it does without either: ``ray start --head --block``
with an ``--autoscaling-config`` for Ray's fake multi-node provider (``RAY_FAKE_CLUSTER=1``), on
a free port (the provider is told the GCS address), in its own process group, stopped by
signalling that group (never ``ray stop``). Its autoscaler (Ray's monitor) reads the pending
placement groups and starts worker nodes of ``worker_types`` as processes on this machine, as a
cloud provider's would start machines.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from typing import Any, Dict, List

START_TIMEOUT_S = 120.0
UPDATE_INTERVAL_S = 1  # the autoscaler's loop (Ray's default is 5 s)


def fake_provider_config(gcs_address: str, head_cpus: int, worker_types: Dict[str, Any]) -> Dict[str, Any]:
    """A cluster config for Ray's fake multi-node provider: the head of ``head_cpus`` CPUs (no
    workers of its own type) and the worker node types an autoscaler may start."""
    types = dict(worker_types)
    types["ray.head.default"] = {"resources": {"CPU": head_cpus}, "node_config": {}, "max_workers": 0}
    return {
        "cluster_name": "det-lite-fake",
        "max_workers": sum(int(t.get("max_workers", 0)) for t in worker_types.values()),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 60,  # a node is not taken back during a test
        "provider": {
            "type": "fake_multinode",
            "gcs_address": gcs_address,
            "use_node_id_as_ip": True,
            "disable_launch_config_check": True,
            "disable_node_updaters": True,
        },
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": types,
        "head_node_type": "ray.head.default",
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AutoscalingHead:
    """A head node of ``head_cpus`` CPUs whose autoscaler adds nodes of ``worker_types``."""

    def __init__(
        self, directory: str, head_cpus: int, worker_types: Dict[str, Any], object_store_bytes: int
    ) -> None:
        import ray

        port = _free_port()
        ip = ray.util.get_node_ip_address()
        self.address = f"{ip}:{port}"
        config = os.path.join(directory, "autoscaling.json")
        with open(config, "w") as f:
            json.dump(fake_provider_config(self.address, head_cpus, worker_types), f)
        self.log = os.path.join(directory, "head.log")  # what ray start says (read when it fails)
        argv = [
            "ray", "start", "--head", "--block", f"--port={port}", f"--num-cpus={head_cpus}",
            f"--autoscaling-config={config}", "--include-dashboard=false", "--disable-usage-stats",
            f"--object-store-memory={object_store_bytes}",
        ]  # fmt: skip
        env = dict(os.environ, RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S=str(UPDATE_INTERVAL_S))
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_started(self) -> None:
        """Until the head answers on its port (``ray start`` exiting first is an error)."""
        host, _, port = self.address.rpartition(":")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ray start exited with {self.proc.returncode}: {self.output()}")
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"the head did not start in {START_TIMEOUT_S:.0f} s: {self.output()}")

    def output(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-3000:]

    def alive_cpus(self) -> List[float]:
        """The CPUs of each alive node (needs ``ray.init`` to this cluster)."""
        import ray

        return [float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]

    def stop(self) -> None:
        """SIGTERM the process group this head (and the nodes its autoscaler started) run in,
        SIGKILL what is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
