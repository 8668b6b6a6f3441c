"""ModelSummary: parameter counts per wrapped model when training starts."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch.callbacks import ModelStats, ModelSummary
from tests.fixtures.cb_trial import CbTrial


class TwoModels(CbTrial):
    """CbTrial's Linear(1, 1, bias=False) (1 parameter, float64) and a second model whose first
    layer is frozen: Linear(3, 4) = 16 frozen, Linear(4, 2) = 10 trainable (float32)."""

    def __init__(self, context: pytorch.PyTorchTrialContext, callbacks: Any = None) -> None:
        super().__init__(context, callbacks)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        net[0].requires_grad_(False)
        self.net = context.wrap_model(net)


def test_counts_per_model_are_logged_at_the_start(caplog: pytest.LogCaptureFixture) -> None:
    summary = ModelSummary()
    with caplog.at_level(logging.INFO, logger="determined_lite"):
        with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
            # progress=False: metric lines go to the log (with a bar they go to stdout)
            trainer = pytorch.Trainer(TwoModels(ctx), ctx, callbacks=[summary])
            trainer.fit(max_length=pytorch.Batch(1), progress=False)
    assert summary.summaries == [
        ModelStats(index=0, name="Linear", total=1, trainable=1, size_bytes=8),
        ModelStats(index=1, name="Sequential", total=26, trainable=10, size_bytes=26 * 4),
    ]
    assert summary.summaries[1].frozen == 16
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("model ")]
    assert lines == [
        "model 0 (Linear): 1 parameters, 1 trainable, 0 frozen, 0.00 MB",
        "model 1 (Sequential): 26 parameters, 10 trainable, 16 frozen, 0.00 MB",
    ]
    # Before any batch: the first training line comes after them.
    messages = [r.getMessage() for r in caplog.records]
    assert messages.index(lines[-1]) < next(i for i, m in enumerate(messages) if m.startswith("batch "))
