"""Issue 12, "Done when": a trial written only against ``determined.*`` that exercises items 1
to 13 (tests/fixtures/determined_fidelity/model_def.py) runs through ``det-lite experiment
create`` on 1 slot and on 2 slots of each engine (torch.distributed and Horovod, Gloo, 2
processes), warm-started from a checkpoint in Determined's own layout, and every run reports
the same closed-form numbers.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List

import numpy as np
import pytest
import torch

from tests.cli_helpers import cli, describe, write_config
from tests.fixtures.determined_ckpts import sgd_state, write_current

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "determined_fidelity")
UUID = "5d0c2b1e-0000-4000-8000-determined038"
W0, LR0, SCALE, SEED = 1.5, 0.005, 16.0, 5

pytestmark = pytest.mark.timeout(600)


def determined_checkpoint(root: str) -> None:
    """What Determined 0.38 saves for FidelityTrial (one model, optimizer, StepLR, GradScaler)."""
    param = torch.nn.Parameter(torch.zeros(1))
    sched = torch.optim.lr_scheduler.StepLR(torch.optim.SGD([param], lr=LR0), step_size=1, gamma=0.5)
    write_current(
        os.path.join(root, UUID),
        weights=[{"weight": torch.tensor([[W0]], dtype=torch.float64)}],
        optimizers=[sgd_state(LR0)],
        lr_schedulers=[sched.state_dict()],
        scaler={"scale": SCALE, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                "_growth_tracker": 0},
        callbacks={"legacy": {}},
        trial_cls_spec="model_def:FidelityTrial",
        hparams={"global_batch_size": 4, "lr": LR0},
        batches_trained=40,
        seed=SEED,
    )


def closed_form() -> List[Dict[str, float]]:
    """Per batch: the lr used, the weight after it, its loss and mean x (epochs of 2 batches)."""
    draws = np.random.RandomState(SEED).rand(6)
    w, out = W0, []
    for b in range(6):
        xs = [1.0, 2.0, 3.0, 4.0] if b % 2 == 0 else [5.0, 6.0, 7.0, 8.0]
        lr = LR0 * 0.5 ** (b // 2)
        sq = sum(x * x for x in xs)
        loss = (w - 2) ** 2 * sq / 4
        w -= lr * sq * (w - 2)  # two backward passes of half means, summed: sum x^2 (w - 2)
        out.append({"weight": w, "loss_vec": loss, "x_mean": sum(xs) / 4, "lr": lr, "np_draw": draws[b]})
    return out


def run(tmp_path, name: str, resources: dict) -> dict:
    root = str(tmp_path / "ckpts")
    if not os.path.isdir(os.path.join(root, UUID)):
        determined_checkpoint(root)
    path = write_config(
        os.path.join(FIXTURE, "const.yaml"),
        tmp_path,
        f"{name}.yaml",
        resources=resources,
        checkpoint_storage={"type": "shared_fs", "host_path": root},
        **{"searcher.source_checkpoint_uuid": UUID},
    )
    proc = cli("experiment", "create", path, FIXTURE, timeout=540)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp_id = int(proc.stdout.split("Created experiment ")[1].split()[0])
    (trial,) = describe(exp_id)["trials"]
    trial["logs"] = cli("trial", "logs", str(trial["id"]), check=True).stdout
    trial["tensorboard"] = os.path.join(os.environ["DET_LITE_HOME"], "tensorboard", f"experiment_{exp_id}")
    return trial


@pytest.mark.parametrize(
    "name, resources",
    [
        ("one_slot", {"slots_per_trial": 1}),
        ("torch", {"slots_per_trial": 2, "distributed_backend": "torch"}),
        ("horovod", {"slots_per_trial": 2, "distributed_backend": "horovod"}),
    ],
)
def test_the_fidelity_trial_gives_determineds_numbers(tmp_path, name: str, resources: dict) -> None:
    trial = run(tmp_path, name, resources)
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 6  # warm start: from 0 (13)
    expected = closed_form()
    metrics = [t["metrics"] for t in trial["training_metrics"]]
    assert [t["total_batches"] for t in trial["training_metrics"]] == [1, 2, 3, 4, 5, 6]
    for got, want in zip(metrics, expected):
        for key in ("weight", "loss_vec", "x_mean", "lr", "np_draw"):  # items 1-4, 13 (optimizer, RNG)
            assert isinstance(got[key], float), key  # the 1-element tensor is a float (item 4)
            assert got[key] == pytest.approx(want[key], rel=1e-12), (key, got)
        assert got["scale"] == SCALE  # the GradScaler's state from the checkpoint, updated by the trial (2)
        assert "phase" in got  # a string metric is reported, not a TypeError (item 5)
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [3, 6]
    for v in trial["validation_metrics"]:
        w = expected[v["total_batches"] - 1]["weight"]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12)
        # over x = 1..5 from a batch_sampler whose len() is 7 (item 10): mean (w - 2)^2 x^2
        assert v["metrics"]["val_loss"] == pytest.approx((w - 2) ** 2 * 11, rel=1e-9)
    assert trial["best_validation"] == pytest.approx((expected[5]["weight"] - 2) ** 2 * 11, rel=1e-9)  # (4)
    logs = trial["logs"]
    slots = resources["slots_per_trial"]
    assert logs.count("fidelity checks passed") == slots  # items 7, 9, 11 on every rank
    assert logs.count("legacy epoch start on rank 0") == 3  # item 8: epochs of 2 batches
    assert logs.count("legacy validation epoch end on rank 0") == 2
    assert "without parameters, which is deprecated" in logs
    # item 12: one warning with both numbers
    assert "records_per_epoch is 100 in the experiment config, but the training DataLoader holds 8" in logs
    assert "len(batch_sampler) is 7 but one pass of it yields 3 batches" in logs  # item 10
    tb = os.path.join(trial["tensorboard"], f"trial_{trial['id']}")
    assert len(glob.glob(os.path.join(tb, "rank*.pt.trace.json"))) == slots  # set_profiler (7)
    assert glob.glob(os.path.join(tb, "events.out.tfevents.*"))  # get_tensorboard_writer (7)
