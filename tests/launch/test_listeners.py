"""Every socket a single-host trial listens on is bound to the loopback address.

Real 2-process runs (torch.distributed and Horovod, Gloo on CPU) through ``det-lite experiment
create``; while they train, the listening TCP sockets of the whole process tree (runner,
torchrun agent or horovodrun wrapper, workers) are sampled with psutil.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Set, Tuple

import psutil
import pytest

from determined_lite.launch import WorkerSpec
from determined_lite.launch._horovodrun import horovodrun_command
from determined_lite.launch._hosts import LOOPBACK, SOCKET_IFNAME_ENV, loopback_interface
from determined_lite.launch._torchrun import torchrun_command
from tests.cli_helpers import REPO, describe, write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
LOOPBACK_ADDRESSES = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
AGENT_MODULES = ("determined_lite.launch._torchrun", "determined_lite.launch._horovodrun")
WORKER_MODULE = "determined_lite.launch.worker"

pytestmark = pytest.mark.timeout(240)

Listener = Tuple[str, int, str]  # address, port, the listening process's role


def _role(proc: psutil.Process) -> str:
    """``launcher``, ``worker`` or the command line: by the module that ``python -m`` runs."""
    cmdline = proc.cmdline()
    module = cmdline[cmdline.index("-m") + 1] if "-m" in cmdline[:-1] else ""
    if module == WORKER_MODULE:
        return "worker"
    if module in AGENT_MODULES:
        return "launcher"
    return " ".join(cmdline)[:80]


def _listeners(root: psutil.Process) -> Set[Listener]:
    """The TCP sockets that ``root`` and its descendants listen on right now."""
    found: Set[Listener] = set()
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            connections = getattr(proc, "net_connections", None) or proc.connections
            for c in connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    found.add((c.laddr.ip, c.laddr.port, _role(proc)))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _run_sampling(config: str, timeout: float = 200) -> Tuple[subprocess.CompletedProcess, Set[Listener]]:
    """Run ``det-lite experiment create CONFIG`` and collect its process tree's listeners."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    root = psutil.Process(proc.pid)
    seen: Set[Listener] = set()
    deadline = time.monotonic() + budget(timeout)
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= _listeners(root)
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), seen


@pytest.mark.parametrize(
    "backend, hosts",
    [("torch", None), ("horovod", None), ("torch", ["localhost:1", "127.0.0.1:1"])],
    ids=["torch", "horovod", "torch-two-local-hosts"],
)
def test_two_worker_run_listens_on_loopback_only(tmp_path, backend, hosts):
    resources: Dict[str, object] = {"slots_per_trial": 2, "distributed_backend": backend}
    if hosts:
        resources["hosts"] = hosts
    # 0.2 s per batch: a few seconds of training while the listeners are sampled.
    config = write_config(
        os.path.join(LINEAR, "const.yaml"), tmp_path, resources=resources, **{"hyperparameters.sleep_s": 0.2}
    )
    result, seen = _run_sampling(config)
    assert result.returncode == 0, result.stdout
    assert describe(1)["trials"][0]["total_batches"] == 12
    roles = {role for _, _, role in seen}
    # The sample saw the services that matter: the launcher's rendezvous and the workers' sockets.
    assert {"launcher", "worker"} <= roles, sorted(seen)
    exposed = sorted(s for s in seen if s[0] not in LOOPBACK_ADDRESSES)
    assert exposed == [], f"listening beyond loopback: {exposed}"


def _spec(tmp_path, backend: str) -> WorkerSpec:
    return WorkerSpec(
        entrypoint="model_def:LinearTrial",
        context_dir=LINEAR,
        exp_conf={"resources": {"slots_per_trial": 2}},
        hparams={},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 1},
        trial_seed=1,
        settings={},
        backend=backend,
        slots=2,
    )


def _args_after(argv: List[str], flag: str) -> Optional[str]:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_single_host_commands_name_loopback(tmp_path, monkeypatch):
    for name in SOCKET_IFNAME_ENV:
        monkeypatch.delenv(name, raising=False)
    lo = loopback_interface()
    assert lo is not None
    argv, env = torchrun_command(_spec(tmp_path, "torch"), str(tmp_path / "spec.json"), None)
    assert "--standalone" not in argv
    assert (_args_after(argv, "--listen-address"), _args_after(argv, "--master-addr")) == (LOOPBACK, LOOPBACK)
    assert _args_after(argv, "--local-addr") == LOOPBACK
    assert {name: env.get(name) for name in SOCKET_IFNAME_ENV} == {name: lo for name in SOCKET_IFNAME_ENV}
    argv, _ = horovodrun_command(_spec(tmp_path, "horovod"), str(tmp_path / "spec.json"), None)
    assert _args_after(argv, "--listen-address") == LOOPBACK
    assert _args_after(argv, "--network-interfaces") == lo


def test_other_hosts_keep_listening_where_they_can_be_reached(tmp_path, monkeypatch):
    for name in SOCKET_IFNAME_ENV:
        monkeypatch.delenv(name, raising=False)
    hosts = ["host-a:1", "host-b:1"]
    argv, env = torchrun_command(_spec(tmp_path, "torch"), str(tmp_path / "spec.json"), hosts)
    plan = argv[-1]
    assert "--listen-address" not in plan and '"--master-addr", "host-a"' in plan
    assert not any(name in env for name in SOCKET_IFNAME_ENV)
    argv, _ = horovodrun_command(_spec(tmp_path, "horovod"), str(tmp_path / "spec.json"), hosts)
    assert "--listen-address" not in argv and "--network-interfaces" not in argv
