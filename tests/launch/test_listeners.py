"""Every socket a single-host trial listens on is bound to the loopback address.

Real 2-process runs (torch.distributed and Horovod, Gloo on CPU) through ``det-lite experiment
create``. A ``listen()`` shim preloaded into the whole process tree (runner, torchrun agent or
horovodrun wrapper, workers) logs every TCP socket that starts listening, however briefly: Horovod's
Gloo pair sockets live about 0.1 s, which sampling can miss on a busy box. psutil names each
process's role while the run trains.
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
SHIM_SOURCE = os.path.join(REPO, "tests", "fixtures", "native", "listen_log.c")
AGENT_MODULES = ("determined_lite.launch._torchrun", "determined_lite.launch._horovodrun")
WORKER_MODULE = "determined_lite.launch.worker"

pytestmark = pytest.mark.timeout(240)

Listener = Tuple[str, int, str]  # address, port, the listening process's role
Completed = subprocess.CompletedProcess


def _role(proc: psutil.Process) -> str:
    """``launcher``, ``worker`` or the command line: by the module that ``python -m`` runs."""
    cmdline = proc.cmdline()
    module = cmdline[cmdline.index("-m") + 1] if "-m" in cmdline[:-1] else ""
    if module == WORKER_MODULE:
        return "worker"
    if module in AGENT_MODULES:
        return "launcher"
    return " ".join(cmdline)[:80]


def _roles(root: psutil.Process) -> Dict[int, str]:
    """The role of ``root`` and of each of its descendants alive right now, by pid.

    A process that has exited but is not yet reaped shows an empty command line: it keeps the role
    an earlier sample gave it.
    """
    found: Dict[int, str] = {}
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            if proc.cmdline():
                found[proc.pid] = _role(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture(scope="module")
def listen_shim(tmp_path_factory) -> str:
    """The ``listen()`` shim, built by the C compiler that Horovod's build needs anyway."""
    out = tmp_path_factory.mktemp("shim") / "liblisten.so"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), SHIM_SOURCE, "-ldl"], check=True)
    return str(out)


def _run_logging(config: str, shim: str, log: str, timeout: float = 200) -> Tuple[Completed, Set[Listener]]:
    """Run ``det-lite experiment create CONFIG`` with the shim; every listener with its role."""
    preload = " ".join(filter(None, [shim, os.environ.get("LD_PRELOAD")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "LD_PRELOAD": preload, "LISTEN_LOG": log},
    )
    root = psutil.Process(proc.pid)
    roles: Dict[int, str] = {}
    deadline = time.monotonic() + budget(timeout)
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            roles.update(_roles(root))
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen: Set[Listener] = set()
    with open(log, "a+") as f:  # a run that fails before any process listens leaves none
        f.seek(0)
        for line in f:
            pid, address, port = line.split()
            seen.add((address, int(port), roles.get(int(pid), f"pid {pid}, gone before it was sampled")))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), seen


@pytest.mark.parametrize(
    "backend, hosts",
    [("torch", None), ("horovod", None), ("torch", ["localhost:1", "127.0.0.1:1"])],
    ids=["torch", "horovod", "torch-two-local-hosts"],
)
def test_two_worker_run_listens_on_loopback_only(tmp_path, listen_shim, backend, hosts):
    resources: Dict[str, object] = {"slots_per_trial": 2, "distributed_backend": backend}
    if hosts:
        resources["hosts"] = hosts
    # 0.2 s per batch: a few seconds of training while the processes' roles are sampled.
    config = write_config(
        os.path.join(LINEAR, "const.yaml"), tmp_path, resources=resources, **{"hyperparameters.sleep_s": 0.2}
    )
    result, seen = _run_logging(config, listen_shim, str(tmp_path / "listen.log"))
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
