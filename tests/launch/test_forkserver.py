"""The fork server (launch/_forkserver.py): a forked 1-slot worker gives each trial exactly the
result a fresh process gives, whatever the trial before it did to its process, and a crashed,
killed or server-less trial never poisons the next."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
import yaml

from determined_lite.launch import _forkserver
from tests.cli_helpers import REPO, cli, describe, own_fork_server_env
from tests.timing import budget

# ``mode``: 0 a clean trial; 1 pollutes every global it can reach, then trains; 2 pollutes, then
# dies by SIGKILL in its first batch; 3 raises in __init__ after polluting; 4 SIGKILLs its parent
# (the fork server, when forked) and then trains to the end.
MODEL_DEF = textwrap.dedent(
    """
    import gc
    import os
    import random
    import signal

    import numpy as np
    import torch

    import determined_lite.pytorch as dlp
    from determined_lite.pytorch import DataLoader, PyTorchTrial

    CONSTRUCTED = []  # a module global a polluting trial appends to


    def pollute():
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1)
        torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 2)
        random.seed(99)
        np.random.seed(99)
        torch.manual_seed(99)
        dlp.POLLUTED = True
        os.environ["POLLUTED"] = "1"
        os.chdir("/")


    class PolluteTrial(PyTorchTrial):
        def __init__(self, context):
            self.context = context
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                self.forked = float(b"_forkserver" in f.read())
            CONSTRUCTED.append(1)
            self.collected = float(len(gc.get_objects()))  # what the collector walks
            mode = int(context.get_hparam("mode"))
            if mode in (1, 2, 3):
                pollute()
            if mode == 3:
                raise RuntimeError("broken trial")
            if mode == 4 and os.environ.get("DET_LITE_FORKSERVER") != "0":
                os.kill(os.getppid(), signal.SIGKILL)
            self.mode = mode
            self.model = context.wrap_model(torch.nn.Linear(3, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05))
            self.seen = {
                "constructed": float(len(CONSTRUCTED)),
                "float64": float(torch.get_default_dtype() == torch.float64),
                "hooks": float(len(torch.nn.modules.module._global_forward_hooks)),
                "polluted": float(getattr(dlp, "POLLUTED", False) or "POLLUTED" in os.environ),
                "in_context": float(os.getcwd() == os.path.dirname(os.path.abspath(__file__))),
                "py_rand": random.random(),
                "np_rand": float(np.random.rand()),
                "torch_rand": float(torch.rand(1)),
            }


        def _data(self):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(32, 3, generator=g)
            return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5]]))

        def build_training_data_loader(self):
            return DataLoader(self._data(), batch_size=8, shuffle=True)

        def build_validation_data_loader(self):
            return DataLoader(self._data(), batch_size=8)

        def train_batch(self, batch, epoch_idx, batch_idx):
            if self.mode == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            return {"val_loss": loss, "forked": self.forked, "collected": self.collected, **self.seen}
    """
)


def _search(tmp_path, modes, forkserver: bool) -> dict:
    context = tmp_path / "context"
    context.mkdir(exist_ok=True)
    (context / "model_def.py").write_text(MODEL_DEF)
    config = {
        "name": "pollution",
        "entrypoint": "model_def:PolluteTrial",
        "hyperparameters": {
            "global_batch_size": 8,
            "mode": {"type": "categorical", "vals": list(modes)},
        },
        "searcher": {
            "name": "grid",
            "metric": "val_loss",
            "max_length": {"batches": 12},
            "max_concurrent_trials": 1,
        },
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 3},
    }
    path = tmp_path / f"exp-{forkserver}.yaml"
    path.write_text(yaml.safe_dump(config))
    # A server of its own: the session's may have been started with another environment (a
    # test's variable), and then this test's trials would start plainly.
    env = dict(own_fork_server_env(), DET_LITE_FORKSERVER="1" if forkserver else "0")
    env["DET_LITE_HOME"] = str(tmp_path / f"home-{forkserver}")
    cli("experiment", "create", str(path), str(context), env=env)
    described = describe(1, home=env["DET_LITE_HOME"])
    return {t["hparams"]["mode"]: t for t in described["trials"]}


def _final(trial: dict) -> dict:
    """The trial's last validation metrics, but whether it was forked and what its collector
    walks."""
    metrics = trial["validation_metrics"][-1]["metrics"]
    return {k: v for k, v in metrics.items() if k not in ("forked", "collected")}


def _forked(trial: dict) -> bool:
    return trial["validation_metrics"][-1]["metrics"]["forked"] == 1.0


def _collected(trial: dict) -> float:
    return trial["validation_metrics"][-1]["metrics"]["collected"]


@pytest.mark.timeout(480)
def test_a_trial_that_pollutes_or_crashes_does_not_change_the_next(tmp_path):
    forked = _search(tmp_path, [1, 2, 3, 0], forkserver=True)
    fresh = _search(tmp_path, [1, 2, 3, 0], forkserver=False)
    assert forked[2]["state"] == fresh[2]["state"] == "ERROR"  # killed by SIGKILL: its exit code seen
    assert forked[3]["state"] == fresh[3]["state"] == "ERROR"
    for mode in (0, 1):
        assert forked[mode]["state"] == "COMPLETED"
        assert _forked(forked[mode]) and not _forked(fresh[mode])
        assert _final(forked[mode]) == _final(fresh[mode])  # bit-exact, every metric
    clean = _final(forked[0])
    assert clean["float64"] == 0.0 and clean["hooks"] == 0.0 and clean["polluted"] == 0.0
    assert clean["constructed"] == 1.0 and clean["in_context"] == 1.0
    assert _final(forked[1])["float64"] == 1.0  # the pollution was real
    assert forked[0]["seed"] == fresh[0]["seed"]
    # The server's objects (torch's import) are frozen: a forked worker's collector never walks
    # them, so its collections copy none of the server's pages.
    assert _collected(fresh[0]) > 100_000 and _collected(forked[0]) < _collected(fresh[0]) / 4


@pytest.mark.timeout(480)
def test_the_fork_server_dying_under_a_trial_lets_it_finish_and_later_trials_start_plainly(tmp_path):
    forked = _search(tmp_path, [4, 0, 1], forkserver=True)
    fresh = _search(tmp_path, [4, 0, 1], forkserver=False)
    for mode in (4, 0, 1):
        assert forked[mode]["state"] == "COMPLETED", forked[mode]
        assert _final(forked[mode]) == _final(fresh[mode])
    assert _forked(forked[4])  # the server it killed had forked it; a new server forks the next
    assert _forked(forked[0]) and _forked(forked[1])


def test_the_switch(monkeypatch):
    monkeypatch.delenv(_forkserver.FORKSERVER_ENV, raising=False)
    assert _forkserver.enabled({})
    assert not _forkserver.enabled({"DET_LITE_FORKSERVER": "0"})
    monkeypatch.setenv(_forkserver.FORKSERVER_ENV, "0")
    assert not _forkserver.enabled({})
    assert _forkserver.spawn(["python", "spec.json"], {}, "/", (), _no_plain_start) is None


def _no_plain_start(fd: int) -> subprocess.Popen:
    raise AssertionError("not started plainly")


def test_a_trial_asked_for_during_the_warm_up_gets_its_handle_at_once(tmp_path, monkeypatch):
    """spawn never waits for the server's warm-up: a trial stopped before the server is ready
    never starts; one waiting when the server dies before it is ready starts plainly."""
    runtime = tempfile.mkdtemp(prefix="fs-", dir="/tmp")  # a server of its own (a short path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    env = dict(os.environ, PYTHONPATH=REPO)
    server = _forkserver.ForkServer(env)
    said = "started plainly"

    def plain(fd: int) -> subprocess.Popen:
        argv = [sys.executable, "-c", f"print({said!r})"]
        return subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True)

    try:
        argv = ["python", "-m", "determined_lite.launch.worker", str(tmp_path / "spec.json")]
        stopped = server.spawn(argv, env, str(tmp_path), (), _no_plain_start)
        waiting = server.spawn(argv, env, str(tmp_path), (), plain)
        assert not server._ready.is_set()  # torch's import takes seconds: both returned before
        assert stopped is not None and waiting is not None and stopped.pid == waiting.pid == 0
        assert stopped.poll() is None and waiting.poll() is None  # running, as far as the runner knows
        stopped.kill_group(signal.SIGTERM)
        os.kill(server._proc.pid, signal.SIGKILL)  # the server dies during its warm-up
        assert stopped.wait(budget(120)) == -signal.SIGKILL and stopped.pid == 0  # never started
        assert waiting.wait(budget(120)) == 0 and waiting.plain and waiting.pid > 0
        assert waiting.stdout.read() == said + "\n"
    finally:
        server.close()
        shutil.rmtree(runtime)


def test_a_fork_with_no_descriptors_to_pass_keeps_none_and_numbered_ones_move_to_their_numbers():
    """The server's child renumbers the descriptors a runner passed (a Ray slot's worker finds its
    report pipes by number); a trial started with none passed (tests/distributed/test_training's
    workers) has nothing to renumber: it once failed on ``max()`` of nothing."""
    from determined_lite.launch import _forkserver_serve

    assert _forkserver_serve._renumber([], []) == []
    read_end, write_end = os.pipe()
    target = max(read_end, write_end) + 10
    try:
        assert _forkserver_serve._renumber([write_end], [target]) == [target]
        os.write(target, b"x")
        assert os.read(read_end, 1) == b"x"
    finally:
        for fd in (read_end, target):
            os.close(fd)
