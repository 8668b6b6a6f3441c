"""``determined.pytorch.experimental.torch_batch_process`` (core/_batch_process.py) through
Determined's batch-inference example as shipped (tests/fixtures/determined_e2e/
torch_batch_process/: CIFAR-10 swapped for scikit-learn's digits), on 2 slots of
torch.distributed: every record predicted once, by the seeded model's exact output, each rank's
files in ``<checkpoint root>/<output uuid>/rank_<r>/``, progress checkpoints as Determined's."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import pytest
import torch

from tests.cli_helpers import cli, describe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "tests", "fixtures", "determined_e2e", "torch_batch_process")

pytestmark = pytest.mark.timeout(600)


def test_batch_inference_example_on_two_slots(_det_lite_home: Any) -> None:
    from sklearn.datasets import load_digits

    proc = cli("experiment", "create", os.path.join(EXAMPLE, "torch_batch_process_config.yaml"), EXAMPLE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    # 1797 records, batches of 200, 2 workers: ceil(1797 / 200 / 2) = 5 batches each; one
    # progress checkpoint at batch 5 (interval 5) recording the smallest steps of the workers.
    (ckpt,) = trial["checkpoints"]
    with open(os.path.join(ckpt["path"], "metadata.json")) as f:
        metadata = json.load(f)
    with open(os.path.join(ckpt["path"], "batch_completed.json")) as f:
        assert json.load(f) == {"batch_completed": 5}
    assert metadata["steps_completed"] == 5
    out_dir = os.path.join(os.path.dirname(ckpt["path"]), metadata["default_output_uuid"])
    files = sorted(glob.glob(os.path.join(out_dir, "rank_*", "prediction_output_*")))
    # 9 batches (8 of 200, one of 197): rank 0 gets 5, rank 1 gets 4 and sees None at its 5th.
    names = [f"rank_0/prediction_output_{i}" for i in range(5)]
    names += [f"rank_1/prediction_output_{i}" for i in range(4)]
    assert sorted(os.path.relpath(p, out_dir) for p in files) == sorted(names)

    import importlib.util

    spec = importlib.util.spec_from_file_location("bp_model", os.path.join(EXAMPLE, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model().eval()
    inputs, labels, preds = [], [], []
    for path in files:
        (out,) = torch.load(path, weights_only=True)
        inputs.append(out["input"][0])
        labels.append(out["input"][1])
        preds.append(out["predictions"])
    x, y, p = torch.cat(inputs), torch.cat(labels), torch.cat(preds)
    digits = load_digits()
    order = sorted(range(len(x)), key=lambda i: x[i].tolist() + [y[i].item()])
    expected = sorted(range(len(digits.data)), key=lambda i: list(digits.data[i]) + [digits.target[i]])
    assert len(x) == 1797  # every record once
    assert torch.equal(x[order], torch.tensor(digits.data[expected], dtype=torch.float64))
    with torch.no_grad():
        assert torch.equal(p, model(x))  # the seeded model's exact output


RESUMING = """import os, pathlib, torch
from sklearn.datasets import load_digits
from determined.pytorch import experimental

class Processor(experimental.TorchBatchProcessor):
    def __init__(self, context):
        self.context = context

    def process_batch(self, batch, batch_idx):
        marker = pathlib.Path(os.environ["MARKER"])
        if batch_idx == 5 and not marker.exists():
            marker.touch()
            raise ConnectionError("failing once at batch 5")  # the network's: restarted
        with self.context.upload_path() as path:
            torch.save(batch[1], pathlib.Path(path, f"labels_{batch_idx}"))
        print(f"processed batch {batch_idx}", flush=True)

digits = load_digits()
data = torch.utils.data.TensorDataset(torch.tensor(digits.data), torch.tensor(digits.target))
experimental.torch_batch_process(Processor, data, batch_size=100, checkpoint_interval=2)
"""


def test_a_restarted_trial_skips_the_batches_its_checkpoint_recorded(
    tmp_path: Any, _det_lite_home: Any
) -> None:
    from sklearn.datasets import load_digits

    context = tmp_path / "ctx"
    context.mkdir()
    (context / "bp.py").write_text(RESUMING)
    config = context / "exp.yaml"
    config.write_text(
        "entrypoint: python3 bp.py\nsearcher:\n  name: single\n  metric: x\nmax_restarts: 1\n"
        f"environment:\n  environment_variables:\n    - MARKER={tmp_path / 'failed-once'}\n"
    )
    proc = cli("experiment", "create", str(config), str(context))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    logs = cli("trial", "logs", str(trial["id"])).stdout
    processed = [int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if "processed batch" in line]
    # 18 batches of 100 (the last 97): 0-4, the failure at 5 (checkpoint at 4), then 4-17.
    assert processed == list(range(0, 5)) + list(range(4, 18))
    assert "Previous run completed 4 steps" in logs
    latest = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    with open(os.path.join(latest["path"], "metadata.json")) as f:
        metadata = json.load(f)
    assert metadata["steps_completed"] == 18
    out = os.path.join(os.path.dirname(latest["path"]), metadata["default_output_uuid"], "rank_0")
    labels = torch.cat([torch.load(os.path.join(out, f"labels_{i}"), weights_only=True) for i in range(18)])
    assert labels.tolist() == load_digits().target.tolist()
