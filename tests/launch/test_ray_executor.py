"""``resources.executor: ray`` on a real 2-node Ray cluster started in this process (head + 1
node, 1 CPU each): trials run through ``det-lite experiment create`` as a user runs them, and
every number the store holds is compared with the linear fixture's closed form."""

from __future__ import annotations

import os
import re

import pytest

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def ray_cluster():
    from tests.ray_cluster import TestCluster

    cluster = TestCluster()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def on_ray(ray_cluster, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    return ray_cluster


def write_config(tmp_path, **changes) -> str:
    changes.setdefault("resources.executor", "ray")
    return _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, "exp.yaml", **changes)


def assert_closed_form(trial: dict, lr: float = 0.01, batches=(4, 8, 12)) -> None:
    assert [v["total_batches"] for v in trial["validation_metrics"]] == list(batches)
    for v in trial["validation_metrics"]:
        w = closed_form(lr, v["total_batches"], batch_size=2, n=8)[-1]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


def placed_nodes(output: str) -> list:
    """The Ray nodes each run's ranks were placed on, from the runner's placement lines."""
    lines = [line for line in output.splitlines() if "placed on the Ray cluster" in line]
    return [re.findall(r"rank \d+ on \S+ \(node (\w+)\)", line) for line in lines]


def test_two_slot_torch_trial_spans_both_nodes(tmp_path, on_ray):
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "torch"}
    path = write_config(tmp_path, **two_slots)
    proc = cli("experiment", "create", path, LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (nodes,) = placed_nodes(proc.stdout + proc.stderr)
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes  # 1 CPU per node: only both fit it
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)  # 2 slots of batch 1 == 1 slot of batch 2 == the closed form
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 12 and os.path.isdir(ckpt["path"])


def test_grid_of_two_trials(tmp_path, on_ray):
    path = write_config(
        tmp_path,
        **{
            "searcher": {
                "name": "grid",
                "metric": "val_loss",
                "max_length": {"batches": 12},
                "max_concurrent_trials": 2,
            },
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
        },
    )
    proc = cli("experiment", "create", path, LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = describe(1)["trials"]
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.02]
    for t in trials:
        assert t["state"] == "COMPLETED"
        assert_closed_form(t, t["hparams"]["lr"])
