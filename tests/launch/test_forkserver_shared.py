"""One fork server serves the runners whose workers import the same thing (launch/_forkserver.py):
a second experiment's trials are forked by the server the first one started, give exactly what
fresh processes give, and the server ends once idle; another environment gets its own server."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import tempfile
import textwrap
import time
import uuid

import pytest
import yaml

from determined_lite.launch import _forkserver
from tests.cli_helpers import cli, describe
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
    cli("experiment", "create", str(path), str(context), env=dict(env, DET_LITE_HOME=home))
    trials = describe(1, home=home)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETED"] * 2
    return {t["hparams"]["lr"]: t["validation_metrics"][-1]["metrics"] for t in trials}


def _servers(metrics: dict) -> set:
    return {int(m.pop("server")) for m in metrics.values()}


@pytest.mark.timeout(480)
def test_a_second_experiment_is_forked_by_the_first_ones_server_until_it_ends_idle(tmp_path):
    # A key of this test's own: no other test's server serves it.
    env = dict(os.environ, DET_LITE_FORKSERVER_IDLE_S="20", SHARED_SERVER_TEST=uuid.uuid4().hex)
    first = _experiment(tmp_path, "first", env)
    (server,) = _servers(first)
    assert server > 0
    with open(f"/proc/{server}/cmdline", "rb") as f:  # read while it is surely alive (idle < 20 s)
        socket_path = f.read().split(b"\0")[-3].decode()  # ... FD PATH IDLE_S
    assert socket_path.startswith(_forkserver.runtime_dir()[0]) and os.path.exists(socket_path)
    second = _experiment(tmp_path, "second", dict(env, PWD="/elsewhere"))  # not part of the key
    other = _experiment(tmp_path, "other", dict(env, SHARED_SERVER_TEST="another key"))
    fresh = _experiment(tmp_path, "fresh", dict(env, DET_LITE_FORKSERVER="0"))
    assert _servers(second) == {server}  # one server for both experiments
    (another,) = _servers(other)
    assert another not in (0, server)
    assert _servers(fresh) == {0}
    assert first == second == other == fresh  # bit-exact: every metric of both trials
    deadline = time.monotonic() + budget(60)
    while _forkserver._alive(server) and time.monotonic() < deadline:  # idle for 20 s: it ends
        time.sleep(0.5)
    assert not _forkserver._alive(server) and not os.path.exists(socket_path)


def test_the_key_follows_what_workers_import_and_not_per_run_variables(monkeypatch):
    env = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "DET_LITE_HOME": "/a", "PWD": "/x"}
    key = _forkserver.server_key(env)
    assert _forkserver.server_key(dict(env, DET_LITE_HOME="/b", PWD="/y", DET_LITE_SUPERVISOR_PID="7")) == key
    assert _forkserver.server_key(dict(env, OMP_NUM_THREADS="2")) != key
    assert _forkserver.server_key(dict(env, TORCH_LOGS="dynamo")) != key
    stamps = _forkserver._files_stamp()
    serve = os.path.join("determined_lite", "launch", "_forkserver_serve.py")
    assert any(p.endswith(serve) for p, _, _ in stamps)
    assert any(p.endswith(os.path.join("torch", "__init__.py")) for p, _, _ in stamps)
    edited = [(p, size + p.endswith(serve), mtime) for p, size, mtime in stamps]
    monkeypatch.setattr(_forkserver, "_files_stamp", lambda: edited)
    assert _forkserver.server_key(env) != key  # an edited checkout gets a new server


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
    assert not _forkserver._private_dir(path)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = str(tmp_path / "link")
    os.symlink(target, link)  # a symlink planted under the name: refused
    assert not _forkserver._private_dir(link)
    monkeypatch.setattr(_forkserver, "_private_dir", lambda p: False)
    fallback, shared = _forkserver.runtime_dir()  # a new private directory: this runner's alone
    assert not shared and fallback != path and stat.S_IMODE(os.stat(fallback).st_mode) == 0o700
    os.rmdir(fallback)
