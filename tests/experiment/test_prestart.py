"""The fork server starts before the first trial (experiment/_trial_launch.py ``prestart``):
from the config file as written, then from the validated config, and the first trial's image
variables match it, so the server started early is the one that forks the trials."""

from __future__ import annotations

import os
from typing import Dict, List

import pytest
import yaml

from determined_lite.config import read_config
from determined_lite.experiment import _create, _trial_launch
from determined_lite.launch import _forkserver, _launcher
from determined_lite.runtime._cluster import SPEC_ENV
from determined_lite.searcher import load_config


class FakeServer:
    started: List[Dict[str, str]] = []

    def __init__(self, env: Dict[str, str]) -> None:
        self.lost = False
        self.image = _forkserver.image_digest(env)
        FakeServer.started.append(env)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_server(monkeypatch):
    FakeServer.started = []
    monkeypatch.setattr(_forkserver, "ForkServer", FakeServer)
    monkeypatch.setattr(_forkserver, "_server", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("DET_LITE_DEVICES", "")
    return FakeServer


def _config(tmp_path, env_vars) -> str:
    config = {
        "entrypoint": "model_def:Trial",
        "hyperparameters": {"global_batch_size": 4},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 2}},
        "environment": {"environment_variables": env_vars},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_raw_and_the_validated_config_give_one_server_the_trial_uses(tmp_path, fake_server):
    path = _config(tmp_path, ["MY_VAR=1", "OTHER=two"])
    _create._prestart(read_config(path), str(tmp_path))  # experiment create, before validating
    assert len(fake_server.started) == 1
    validated = load_config(path).to_dict()
    _trial_launch.prestart(validated, str(tmp_path))
    assert len(fake_server.started) == 1
    env = fake_server.started[0]
    assert env["MY_VAR"] == "1" and env["OTHER"] == "two"
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // _trial_launch.cpu_slots()))
    # The image variables of the environment launch() gives the first trial are the server's.
    trial_env = _launcher._worker_env(_trial_launch.worker_env(validated), {})
    trial_env[SPEC_ENV] = str(tmp_path / "spec.json")
    assert _forkserver._server.image == _forkserver.image_digest(trial_env)
    # A trial with another value of one of its variables is not forked from it.
    assert _forkserver._server.image != _forkserver.image_digest(dict(trial_env, MY_VAR="2"))


def test_no_server_for_gpus_a_startup_hook_or_when_off(tmp_path, fake_server, monkeypatch):
    path = _config(tmp_path, [])
    validated = load_config(path).to_dict()
    (tmp_path / "startup-hook.sh").write_text("true\n")
    _trial_launch.prestart(validated, str(tmp_path))
    assert fake_server.started == []
    (tmp_path / "startup-hook.sh").unlink()
    monkeypatch.setenv("DET_LITE_FORKSERVER", "0")
    _trial_launch.prestart(validated, str(tmp_path))
    assert fake_server.started == []
    monkeypatch.setenv("DET_LITE_FORKSERVER", "1")
    monkeypatch.setenv("DET_LITE_DEVICES", "0")
    _trial_launch.prestart(validated, str(tmp_path))
    assert fake_server.started == []
    monkeypatch.setenv("DET_LITE_DEVICES", "")
    _trial_launch.prestart(validated, str(tmp_path))
    assert len(fake_server.started) == 1
