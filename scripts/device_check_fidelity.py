"""Device check for issue 12, items 7 and 13, on CUDA (the test suite is CPU-only).

``context.autocast_forward_pass`` autocasts to float16 and gives float32 back, and a Determined
checkpoint with a ``gpu_rng_state`` warm-starts a CUDA trial with its weights, optimizer state
and CUDA random state. From the repository root, on a CUDA machine:

    DET_LITE_HOME=$(mktemp -d) python3 scripts/device_check_fidelity.py
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from typing import Any, Dict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from determined_lite import pytorch  # noqa: E402
from tests.fixtures.determined_ckpts import sgd_state, write_current  # noqa: E402
from tests.fixtures.linear import LinearTrial, expected_weights  # noqa: E402

HP = {"lr": 0.01, "global_batch_size": 2, "dataset_size": 8}


def check_autocast_forward_pass() -> None:
    seen = []

    class Probe(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            seen.append(torch.is_autocast_enabled("cuda"))
            return super().forward(x)

    with pytorch.init(hparams=HP, enable_tensorboard_logging=False) as ctx:
        assert ctx.device.type == "cuda", ctx.device
        model = Probe(3, 1, bias=False).cuda()
        with torch.no_grad():
            model.weight.copy_(torch.tensor([[1 / 3, 1 / 7, 1 / 11]]))
        x = torch.tensor([[1.1, 2.3, 3.7]], device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            half = model(x)
        out = ctx.autocast_forward_pass(model)(x)
    print("autocast_forward_pass:", seen, half.dtype, out.dtype, flush=True)
    assert seen == [True, True] and half.dtype == torch.float16 and out.dtype == torch.float32
    assert torch.equal(out, half.float())


class Draw(LinearTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        if not hasattr(self, "draw"):
            self.draw = torch.rand(1, device="cuda").item()
        return super().train_batch(batch, epoch_idx, batch_idx)


def check_warm_start_with_gpu_rng_state() -> None:
    weight = torch.tensor([[1.5]], dtype=torch.float64)
    path = write_current(
        os.path.join(tempfile.mkdtemp(), "uuid"),
        weights=[{"weight": weight}],
        optimizers=[sgd_state(0.001)],
        trial_cls_spec="tests.fixtures.linear:LinearTrial",
        hparams=HP,
        batches_trained=6,
        seed=None,
    )
    state_file = os.path.join(path, "state_dict.pth")
    state = torch.load(state_file, weights_only=True)
    torch.cuda.manual_seed(9)
    gpu = torch.cuda.get_rng_state(0)
    expected_draw = torch.rand(1, device="cuda").item()
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    state["rng_state"] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": np.random.get_state(),
        "random_rng_state": random.getstate(),
        "gpu_rng_state": gpu,
    }
    torch.save(state, state_file)
    with pytorch.init(hparams=HP, enable_tensorboard_logging=False) as ctx:
        trial = Draw(ctx)
        pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(4), warm_start=path, progress=False, record=False
        )
    want = expected_weights(1.5, 0.001, [[1, 2], [3, 4], [5, 6], [7, 8]])
    print("warm start:", trial.recorder.weights, want, trial.draw, expected_draw, flush=True)
    assert all(abs(a - b) < 1e-12 for a, b in zip(trial.recorder.weights, want))
    assert trial.draw == expected_draw
    loaded = pytorch.load_trial_from_checkpoint_path(path)
    assert loaded.model.weight.item() == 1.5 and loaded.model.weight.device.type == "cuda"


if __name__ == "__main__":
    print("torch", torch.__version__, "cuda", torch.cuda.is_available(), flush=True)
    check_autocast_forward_pass()
    check_warm_start_with_gpu_rng_state()
    print("DEVICE CHECK OK", flush=True)
