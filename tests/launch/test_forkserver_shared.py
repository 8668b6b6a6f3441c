"""One fork server per user and installation (launch/_forkserver.py): a second experiment's trials
are forked by the server the first one started, whatever its environment, and give exactly what
fresh processes give; a trial whose image variables differ starts plainly; the server ends once
idle, and ``det-lite server list|stop`` list and stop it."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import tempfile
import textwrap

import pytest
import yaml

from determined_lite.launch import _forkserver, _server_registry
from tests.cli_helpers import REPO, cli, describe
from tests.timing import budget

MODEL_DEF = textwrap.dedent(
    """
    import os

    import torch

    from determined_lite.pytorch import DataLoader, PyTorchTrial


    class Trial(PyTorchTrial):
        def __init__(self, context):
            self.context = context
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                forked = b"_forkserver_serve" in f.read()
            self.server = float(os.getppid() if forked else 0)
            self.model = context.wrap_model(torch.nn.Linear(3, 1))
            lr = context.get_hparam("lr")
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=lr))

        def _data(self):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(32, 3, generator=g)
            return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]))

        def build_training_data_loader(self):
            return DataLoader(self._data(), batch_size=8, shuffle=True)

        def build_validation_data_loader(self):
            return DataLoader(self._data(), batch_size=8)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y), "server": self.server}
    """
)


def _experiment(tmp_path, name: str, env: dict) -> dict:
    """A 2-trial grid search in its own $DET_LITE_HOME; each trial's last validation metrics."""
    context = tmp_path / "context"
    context.mkdir(exist_ok=True)
    (context / "model_def.py").write_text(MODEL_DEF)
    config = {
        "name": name,
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 8, "lr": {"type": "categorical", "vals": [0.01, 0.05]}},
        "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 8}},
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 5},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    home = str(tmp_path / f"home-{name}")
    cli("experiment", "create", str(path), str(context), env=dict(env, DET_LITE_HOME=home), check=True)
    trials = describe(1, home=home)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"] * 2
    return {t["hparams"]["lr"]: t["validation_metrics"][-1]["metrics"] for t in trials}


def _servers(metrics: dict) -> set:
    return {int(m.pop("server")) for m in metrics.values()}


def _listed(env: dict) -> list:
    """``det-lite server list --json``."""
    return json.loads(cli("server", "list", "--json", env=env, check=True).stdout)


@pytest.mark.timeout(480)
def test_one_server_per_installation_whatever_the_environment_until_it_ends_idle(short_tmp, monkeypatch):
    tmp_path = short_tmp
    # A runtime directory of this test's own: no other test's server serves it.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    # The environment a runner gives its trials and its server (launch/_launcher.py puts the
    # installation first on PYTHONPATH): a server started with a bare one would never fork them.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != REPO]
    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="20", PYTHONPATH=os.pathsep.join([REPO] + paths))
    # This process connects first, as a runner does: the server cannot end idle between the
    # experiments, however slowly each starts on a loaded machine.
    held = _forkserver.ForkServer(env)
    try:
        assert held._proc is not None
        first = _experiment(tmp_path, "first", env)
        # Another shell's session and det-lite's own variables: forked from the same server.
        session = dict(env, PWD="/elsewhere", TERM="dumb", DET_LITE_PROGRESS="0")
        second = _experiment(tmp_path, "second", session)
        # A variable that may shape an interpreter's image (any other): a plain process, not a
        # second server.
        image = _experiment(tmp_path, "image", dict(env, PYTHONHASHSEED="7", MY_PROJECT_TOKEN="x"))
        fresh = _experiment(tmp_path, "fresh", dict(env, DET_LITE_FORKSERVER="0"))
        (listed,) = _listed(env)  # the one server
    finally:
        held.close()
    server = held._proc.pid
    assert _servers(first) == _servers(second) == {server}  # one server for both experiments
    assert _servers(image) == _servers(fresh) == {0}
    assert first == second == image == fresh  # bit-exact: every metric of both trials
    assert (listed["pid"], listed["this_installation"], listed["trials"]) == (server, True, 0)
    assert listed["idle_limit_s"] == 20.0 and listed["memory_bytes"] > 100 * 2**20
    socket_path = listed["socket"]
    assert socket_path == os.path.join(_forkserver.runtime_dir()[0], f"fs-{_forkserver.server_key()}.sock")
    assert socket_path.startswith(str(tmp_path)) and os.path.exists(socket_path)
    assert held._proc.wait(budget(60)) == 0  # idle for 20 s once this process left: it ends
    assert not os.path.exists(socket_path) and not os.path.exists(socket_path[: -len(".sock")] + ".json")
    assert _listed(env) == []


def test_server_stop_ends_the_server_and_removes_its_socket(short_tmp, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="600")
    server = _forkserver.ForkServer(env)  # started by this process, as a runner starts it
    try:
        assert server._proc is not None
        pid = server._proc.pid
        listing = cli("server", "list", env=env, check=True).stdout
        assert (
            str(pid) in listing and "* " + os.path.dirname(_forkserver.__file__)[: -len("/launch")] in listing
        )
        bad = cli("server", "stop", "1", env=env)
        assert (bad.returncode, bad.stderr) == (
            2,
            "det-lite: error: no fork server of yours has pid 1 ('det-lite server list' shows them)\n",
        )
        stopped = cli("server", "stop", env=env, check=True)
        assert stopped.stdout == f"Stopped fork server {pid}.\n"
        assert server._proc.wait(budget(10)) == 0  # it ended on its own terms
        assert os.listdir(_forkserver.runtime_dir()[0]) == [f"fs-{_forkserver.server_key()}.sock.lock"]
        assert cli("server", "stop", env=env, check=True).stdout == "No fork server to stop.\n"
    finally:
        server.close()


def test_the_key_is_the_installation_and_the_image_variables_are_checked_per_trial(monkeypatch):
    key = _forkserver.server_key()
    stamps = _server_registry._files_stamp()
    serve = os.path.join("determined_lite", "launch", "_forkserver_serve.py")
    assert any(p.endswith(serve) for p, _, _ in stamps)
    assert any(p.endswith(os.path.join("torch", "__init__.py")) for p, _, _ in stamps)
    edited = [(p, size + p.endswith(serve), mtime) for p, size, mtime in stamps]
    monkeypatch.setattr(_server_registry, "_files_stamp", lambda: edited)
    assert _forkserver.server_key() != key  # an edited checkout gets a new server
    env = {
        "PATH": "/usr/bin",
        "HOME": "/h",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "DET_LITE_HOME": "/a",
        "PWD": "/x",
        "AWS_SECRET_ACCESS_KEY": "s",
        "PYTHONPATH": "/repo",
        "PYTHONHASHSEED": "3",
        "TORCH_LOGS": "dynamo",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LD_PRELOAD": "/lib/x.so",
        "MKL_NUM_THREADS": "2",
    }
    assert _forkserver.image_env(env) == {
        "PATH": "/usr/bin",
        "HOME": "/h",
        "AWS_SECRET_ACCESS_KEY": "s",
        "PYTHONPATH": "/repo",
        "PYTHONHASHSEED": "3",
        "TORCH_LOGS": "dynamo",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LD_PRELOAD": "/lib/x.so",
        "MKL_NUM_THREADS": "2",
    }
    # Any variable not known to be applied per fork counts: CXX is read by torch's inductor
    # when it is imported (tests/distributed/test_compile_distributed.py's missing compiler).
    digest = _forkserver.image_digest(env)
    assert _forkserver.image_digest(dict(env, CXX="/no/c++")) != digest
    assert _forkserver.image_digest(dict(env, DET_LITE_HOME="/b", PWD="/y", OMP_NUM_THREADS="4")) == digest


@pytest.fixture
def short_tmp():
    """A directory with a short name: a socket's path holds 108 bytes."""
    path = tempfile.mkdtemp(prefix="fs-", dir="/tmp")
    yield pathlib.Path(path)
    shutil.rmtree(path)


def test_sockets_live_in_a_directory_only_the_user_can_enter(short_tmp, monkeypatch):
    tmp_path = short_tmp
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path, shared = _forkserver.runtime_dir()
    assert shared and path == str(tmp_path / f"det-lite-{os.getuid()}")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    os.chmod(path, 0o755)  # opened up to others: refused
    assert not _server_registry._private_dir(path)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = str(tmp_path / "link")
    os.symlink(target, link)  # a symlink planted under the name: refused
    assert not _server_registry._private_dir(link)
    monkeypatch.setattr(_server_registry, "_private_dir", lambda p: False)
    fallback, shared = _forkserver.runtime_dir()  # a new private directory: this runner's alone
    assert not shared and fallback != path and stat.S_IMODE(os.stat(fallback).st_mode) == 0o700
    os.rmdir(fallback)
    made = []
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: made.append(mkdtemp(**kw)) or made[-1])
    assert _server_registry.servers() == [] and len(made) == 1 and not os.path.exists(made[0])
