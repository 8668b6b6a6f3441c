"""A Determined context directory through ``det-lite experiment create``, unchanged.

``tests/fixtures/determined_trial`` is written only against ``determined.*``; its const.yaml is
a Determined config with cluster-only fields. Every number is checked against its closed form:
x = 1..8, y = 2x, one weight from 0, SGD, lr halved every epoch (StepLR, STEP_EVERY_EPOCH),
per-slot batch 2, so an epoch is 4 batches; validation on x = 1..5 in batches [1,2], [3,4], [5].
"""

from __future__ import annotations

import os
import re
from typing import List, Optional, Sequence

import numpy as np
import pytest

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "determined_trial")
UNUSED = "bind_mounts, environment.image, resources.resource_pool"

pytestmark = pytest.mark.timeout(300)


def write_config(tmp_path, **changes) -> str:
    return _write_config(os.path.join(FIXTURE, "const.yaml"), tmp_path, **changes)


# --- closed forms -----------------------------------------------------------------------------


def epoch_orders(epochs: int, seed: Optional[int]) -> List[List[int]]:
    """Record order per epoch: in order, or the RandomState(seed) shuffles of Determined's sampler."""
    rng = None if seed is None else np.random.RandomState(seed)
    orders = []
    for _ in range(epochs):
        order = list(range(8))
        if rng is not None:
            rng.shuffle(order)
        orders.append(order)
    return orders


def weights(batches: int, seed: Optional[int] = None, lr: float = 0.01, gamma: float = 0.5) -> List[float]:
    """The weight after each batch; x = index + 1."""
    orders = epoch_orders(-(-batches // 4), seed)
    w, out = 0.0, []
    for b in range(batches):
        epoch, j = divmod(b, 4)
        xs = [orders[epoch][i] + 1.0 for i in range(2 * j, 2 * j + 2)]
        w -= lr * gamma**epoch * sum(2 * x * x * (w - 2) for x in xs) / len(xs)
        out.append(w)
    return out


def batch_losses(batches: int, seed: Optional[int] = None) -> List[float]:
    ws = [0.0] + weights(batches, seed)
    orders = epoch_orders(-(-batches // 4), seed)
    out = []
    for b in range(batches):
        epoch, j = divmod(b, 4)
        xs = [orders[epoch][i] + 1.0 for i in range(2 * j, 2 * j + 2)]
        out.append(sum((ws[b] - 2) ** 2 * x * x for x in xs) / len(xs))
    return out


def assert_validations(trial: dict, at: Sequence[int], seed: Optional[int] = None) -> None:
    assert [v["total_batches"] for v in trial["validation_metrics"]] == list(at)
    ws = weights(max(at), seed)
    for v in trial["validation_metrics"]:
        w, m = ws[v["total_batches"] - 1], v["metrics"]
        e2 = (w - 2) ** 2
        assert m["weight"] == pytest.approx(w, rel=1e-12)
        # Reducer.AVG weighs batches by length (the mean over 5 records: 55/5 = 11); BATCH_AVG is
        # Determined's mean of the 3 batch means ((2.5 + 12.5 + 25) / 3).
        assert m["val_loss"] == pytest.approx(11 * e2, rel=1e-9)
        assert m["val_loss_batch_avg"] == pytest.approx(40 / 3 * e2, rel=1e-9)
        assert m["val_sum_sq_err"] == pytest.approx(55 * e2, rel=1e-9)  # context.wrap_reducer(sum)
        assert m["val_records"] == 5  # context.experimental.wrap_reducer(MetricReducer)


# --- tests ------------------------------------------------------------------------------------


def test_a_determined_context_directory_runs_unchanged():
    proc = cli("experiment", "create", os.path.join(FIXTURE, "const.yaml"), FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "ignoring Determined fields" in line]
    assert warnings == [
        f"det-lite: warning: {os.path.join(FIXTURE, 'const.yaml')}: ignoring Determined fields that "
        f"det-lite does not use locally: {UNUSED}"
    ]
    assert "det-lite: trial code imports 'determined': no Determined installation found, so it gets " in (
        proc.stderr
    )
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["total_batches"] == 12  # searcher.max_length: {epochs: 3}
    assert_validations(trial, [4, 8, 12])
    ws, losses = weights(12), batch_losses(12)
    assert [t["total_batches"] for t in trial["training_metrics"]] == [2, 4, 6, 8, 10, 12]
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)
        assert t["metrics"]["loss"] == pytest.approx((losses[b - 2] + losses[b - 1]) / 2, rel=1e-12)
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 12
    logs = cli("trial", "logs", str(trial["id"])).stdout
    # on_checkpoint_upload_end(uuid): once per checkpoint (one after each validation).
    uploaded = re.findall(r"checkpoint uploaded: ([0-9a-f-]{36})", logs)
    assert len(uploaded) == 3 and uploaded[-1] == ckpt["uuid"]
    assert "trial imports 'determined': det-lite's compatibility alias" in logs


def test_newer_signatures_records_length_and_invalid_hp(tmp_path):
    path = write_config(
        tmp_path,
        **{
            "entrypoint": "model_def:NewStyleTrial",
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"records": 12}},
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 5.0]},
        },
    )
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = {t["hparams"]["lr"]: t for t in describe(1)["trials"]}
    assert trials[5.0]["state"] == "CANCELED"  # det.InvalidHP ends that trial only
    trial = trials[0.01]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 6  # 12 records / 2 per batch
    assert_validations(trial, [4, 6])
    for v in trial["validation_metrics"]:
        assert v["metrics"]["last_batch_idx"] == 2  # evaluate_batch(batch, batch_idx): 3 batches
    losses = batch_losses(6)
    for t in trial["training_metrics"]:  # train_batch returned the loss tensor
        b = t["total_batches"]
        assert t["metrics"] == {"loss": pytest.approx((losses[b - 2] + losses[b - 1]) / 2, rel=1e-12)}
    logs = cli("trial", "logs", str(trials[5.0]["id"])).stdout
    assert "lr 5.0 is above max_lr 1.0" in logs


def _resume_config(tmp_path, **changes) -> str:
    return write_config(
        tmp_path,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
            "hyperparameters.loader": {"type": "categorical", "vals": ["det_shuffle", "sampler", "torch"]},
            "min_checkpoint_period": {"batches": 3},
            **changes,
        },
    )


def test_restart_from_a_checkpoint_equals_an_uninterrupted_run(tmp_path):
    """Shuffled data three ways (det-lite's shuffle, a samplers.ReproducibleShuffleSampler in the
    DataLoader, and a plain torch loader over samplers): a failure at batch 7 restarts from the
    checkpoint at batch 6 (mid-epoch), and every metric equals the uninterrupted run's."""
    assert cli("experiment", "create", _resume_config(tmp_path), FIXTURE).returncode == 0
    markers = tmp_path / "markers"
    markers.mkdir()
    path = _resume_config(
        tmp_path, **{"hyperparameters.fail_once_at": 7, "hyperparameters.marker_dir": str(markers)}
    )
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clean = {t["hparams"]["loader"]: t for t in describe(1)["trials"]}
    restarted = {t["hparams"]["loader"]: t for t in describe(2)["trials"]}
    assert sorted(clean) == sorted(restarted) == ["det_shuffle", "sampler", "torch"]
    for loader, trial in restarted.items():
        ref = clean[loader]
        assert trial["state"] == ref["state"] == "COMPLETED"
        assert (trial["restarts"], ref["restarts"]) == (1, 0)
        assert trial["seed"] == ref["seed"]
        assert trial["validation_metrics"] == ref["validation_metrics"], loader
        assert trial["training_metrics"] == ref["training_metrics"], loader
        logs = cli("trial", "logs", str(trial["id"])).stdout
        assert "injected failure at batch 7" in logs and "(batch 6)" in logs
    # The samplers give Determined's order: RandomState(trial seed) shuffles, one per epoch.
    for loader in ("sampler", "torch"):
        assert_validations(restarted[loader], [4, 8, 12], seed=restarted[loader]["seed"])
    assert restarted["det_shuffle"]["validation_metrics"][0]["metrics"]["weight"] != pytest.approx(
        weights(4)[-1]
    )  # shuffled, not in order


def test_unknown_field_is_an_error_naming_its_path(tmp_path):
    path = write_config(tmp_path, **{"resources.resource_poool": "gpu"})
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 2
    assert f"{path}: resources.resource_poool: unknown field" in proc.stderr
    assert "Traceback" not in proc.stderr and "Created experiment" not in proc.stdout


PROBE = '''
import determined
import torch
from determined_lite.pytorch import DataLoader, PyTorchTrial

DATA = torch.utils.data.TensorDataset(torch.ones(4, 1))


class Probe(PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1))

    def build_training_data_loader(self):
        return DataLoader(DATA, batch_size=2)

    def build_validation_data_loader(self):
        return DataLoader(DATA, batch_size=2)

    def train_batch(self, batch, epoch_idx, batch_idx):
        return {"loss": torch.zeros(())}

    def evaluate_batch(self, batch):
        return {"real": float(getattr(determined, "FAKE_REAL", 0.0))}
'''


def test_an_installed_determined_is_never_shadowed(tmp_path):
    site = tmp_path / "site"
    (site / "determined").mkdir(parents=True)
    (site / "determined" / "__init__.py").write_text("FAKE_REAL = 1.0\n")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "probe.py").write_text(PROBE)
    config = tmp_path / "probe.yaml"
    config.write_text(
        "entrypoint: probe:Probe\nhyperparameters: {global_batch_size: 2}\n"
        "searcher: {name: single, metric: real, max_length: {batches: 2}}\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), REPO]))
    proc = cli("experiment", "create", str(config), str(ctx), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    real = site / "determined" / "__init__.py"
    assert (
        f"det-lite: warning: trial code imports 'determined' and a real Determined is installed at {real}: "
        "the trial gets that package, not det-lite's alias"
    ) in proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["validation_metrics"][-1]["metrics"]["real"] == 1.0  # the trial got the real one
    logs = cli("trial", "logs", str(trial["id"])).stdout
    assert f"gets the installed package at {real}, not det-lite's alias" in logs
