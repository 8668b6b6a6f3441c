"""`det-lite tensorboard`: several experiments, a taken port gives way, the URL printed once
bound, and the HParams plugin comparing every trial by its hyperparameters and metrics."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from determined_lite.store import Store, tensorboard_dir
from tests.cli_helpers import REPO, cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")


def _experiment(tmp_path, name: str, lrs) -> None:
    path = _write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        name,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 4}},
            "hyperparameters.lr": {"type": "categorical", "vals": lrs},
            "min_validation_period": {"batches": 2},
        },
    )
    cli("experiment", "create", path, LINEAR, check=True)


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + budget(timeout)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            return proc.stdout.readline()
        if proc.poll() is not None:
            break
    why = proc.stderr.read() if proc.poll() is not None else "still running"
    raise AssertionError(f"no URL from det-lite tensorboard: {why}")


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.timeout(240)
def test_two_experiments_on_a_taken_port_with_hparams(tmp_path, _det_lite_home):
    _experiment(tmp_path, "a.yaml", [0.01, 0.02])
    _experiment(tmp_path, "b.yaml", [0.03])
    trials = {t["id"]: (e, t) for e in (1, 2) for t in describe(e)["trials"]}
    for eid, t in trials.values():
        trial_dir = os.path.join(tensorboard_dir(eid), f"trial_{t['id']}")
        # One directory per trial, no sub-run (SummaryWriter.add_hparams would add one).
        assert all(os.path.isfile(os.path.join(trial_dir, f)) for f in os.listdir(trial_dir))

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "tensorboard", "1", "2", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        # As a shell starts a background job: SIGINT ignored. Ctrl-C must still stop the server.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        line = _read_line(proc, timeout=budget(90))
        assert line.startswith("TensorBoard for experiments 1, 2 at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split()[0]
        bound = int(url.rstrip("/").rsplit(":", 1)[1])
        assert bound != port and bound > 0
        runs: list = []
        for _ in range(60):  # TensorBoard loads the event files in the background
            with urllib.request.urlopen(url + "data/runs", timeout=30) as response:
                runs = json.loads(response.read())
            if len(runs) == 3:
                break
            time.sleep(0.5)
        expected = {f"experiment_{eid}/trial_{tid}" for tid, (eid, _) in trials.items()}
        assert set(runs) == expected

        experiment = _post(url + "data/plugin/hparams/experiment", {"experimentName": ""})
        lr = next(h for h in experiment["hparamInfos"] if h["name"] == "lr")
        assert lr["differs"] and lr["domainInterval"] == {"minValue": 0.01, "maxValue": 0.03}
        tags = {m["name"]["tag"] for m in experiment["metricInfos"]}
        assert {"validation/val_loss", "validation/weight"} <= tags

        groups = _post(
            url + "data/plugin/hparams/session_groups",
            {"experimentName": "", "startIndex": 0, "sliceSize": 100, "allowedStatuses": ["STATUS_UNKNOWN"]},
        )["sessionGroups"]
        assert {g["name"] for g in groups} == expected  # one row per trial
        for group in groups:
            eid, t = trials[int(group["name"].rsplit("_", 1)[1])]
            assert group["hparams"]["lr"] == t["hparams"]["lr"]
            shown = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
            final = t["validation_metrics"][-1]["metrics"]["val_loss"]
            assert shown["validation/val_loss"] == pytest.approx(final, rel=1e-6)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=budget(30))
        finally:
            proc.kill()  # no server outlives the test, whatever happened
            taken.close()
    assert code == 0


@pytest.mark.slow
def test_several_experiments_without_launch(_det_lite_home):
    store = Store()
    for name in ("a", "b"):
        store.experiments.create({"name": name}, "/ctx", "/ctx/exp.yaml")
    proc = cli("tensorboard", "1", "2", "--no-launch", "--json", check=True)
    shown = json.loads(proc.stdout)
    assert shown["logdir"] == {"experiment_1": tensorboard_dir(1), "experiment_2": tensorboard_dir(2)}
    spec = f"experiment_1:{tensorboard_dir(1)},experiment_2:{tensorboard_dir(2)}"
    assert shown["command"][3:] == ["--logdir_spec", spec, "--port", "6006", "--host", "127.0.0.1"]
    missing = cli("tensorboard", "1", "9", "--no-launch")
    assert missing.returncode == 2 and "experiment 9 not found" in missing.stderr


def test_port_zero_means_any_free_port():
    # `--port 0` is documented as "any free port": it must not be read as "0, else the next ten"
    # (which gave port 1 to a root user).
    from determined_lite.tensorboard.serving import first_free_port as _first_free_port

    assert _first_free_port("127.0.0.1", 0) == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert _first_free_port("127.0.0.1", port) != port  # a taken port is skipped
