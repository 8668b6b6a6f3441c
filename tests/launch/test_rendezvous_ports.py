"""Rendezvous ports are bound by the process that listens on them and published, never picked,
released and bound again (a race with any other process on the machine): issue 41."""

from __future__ import annotations

import ast
import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = os.path.join(REPO, "determined_lite", "launch")


def _functions(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _calls(function, name):
    return [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
    ]


@pytest.mark.parametrize("module", sorted(m for m in os.listdir(LAUNCH) if m.endswith(".py")))
def test_no_launcher_binds_a_socket_it_does_not_listen_on(module):
    """A function that binds a socket to an address ``(host, port)`` listens on it (and keeps
    it or hands it over): none binds a port only to learn a free number and close it."""
    for function in _functions(os.path.join(LAUNCH, module)):
        if any(call.args and isinstance(call.args[0], ast.Tuple) for call in _calls(function, "bind")):
            assert _calls(function, "listen"), f"{module}: {function.name} binds a socket it never listens on"


def _spec(tmp_path, slots):
    from determined_lite.runtime._spec import WorkerSpec

    return WorkerSpec(
        "m:T",
        str(tmp_path),
        {},
        {},
        str(tmp_path / "result.json"),
        {"batches": 1},
        0,
        {},
        backend="torch",
        slots=slots,
    )


@pytest.mark.parametrize("hosts", [["localhost:1", "localhost:1"], ["localhost:1", "node-b:2"]])
def test_the_first_local_agent_binds_and_publishes_the_rendezvous_port(tmp_path, hosts):
    """Every agent is planned at port 0: the first one (on this machine) binds its store and
    writes the port it got (``--publish-fd``); the supervisor starts the others with it."""
    from determined_lite.launch._torchrun import at_port, publishing, torchrun_command

    slots = sum(int(h.rpartition(":")[2]) for h in hosts)
    argv, _ = torchrun_command(_spec(tmp_path, slots), str(tmp_path / "spec.json"), hosts)
    plan = json.loads(argv[4])
    assert plan["publish"] is True
    agents = [a["argv"] for a in plan["agents"]]
    assert [a[a.index("--master-port") + 1] for a in agents] == ["0"] * len(hosts)
    assert "--listen-address" in agents[0][: agents[0].index("--")]
    first = publishing(agents[0], 7)
    assert first[first.index("--publish-fd") + 1] == "7" and first.index("--publish-fd") < first.index("--")
    other = at_port(agents[1], 41234)
    assert other[other.index("--master-port") + 1] == "41234"


def test_an_agent_writes_the_port_its_store_listens_on(tmp_path):
    """The first agent's store is bound before its port is published: a client reaches it at
    the published port (the agent is stopped by closing its stdin once the port was read)."""
    import datetime
    import subprocess

    import torch.distributed as dist

    from determined_lite.launch._torchrun import publishing, torchrun_command

    argv, env = torchrun_command(
        _spec(tmp_path, 2), str(tmp_path / "spec.json"), ["localhost:1", "localhost:1"]
    )
    first = json.loads(argv[4])["agents"][0]["argv"]
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        publishing(first, write_fd),
        pass_fds=(write_fd,),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, **env),
    )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as published:
            port = int(published.readline())
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
        client.set("probe", "1")
        assert client.get("probe") == b"1"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # --watch-stdin: the agent stops itself
        proc.wait(timeout=60)
    assert sys.executable == first[0]
