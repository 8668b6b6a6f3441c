"""LRMonitor: every param group's learning rate at the start and at each report, in TensorBoard."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch.callbacks import LRMonitor
from tests.fixtures.cb_trial import GAMMA, LR, CbTrial, fit_cb_trial
from tests.fixtures.tb import scalars

TAG = "lr/optimizer0/group0"


def test_learning_rates_at_start_and_reports_reach_tensorboard() -> None:
    monitor = LRMonitor()
    trial, _ = fit_cb_trial(max_batches=4, validation=None, reporting=2, trainer_callbacks=[monitor])
    # StepLR multiplies the rate by 0.9 after every optimizer step (one per batch).
    expected = [(0, LR), (2, LR * GAMMA**2), (4, LR * GAMMA**4)]
    assert [(step, rates[TAG]) for step, rates in monitor.history] == [
        (s, pytest.approx(v, rel=1e-12)) for s, v in expected
    ]
    written = scalars(str(trial.context.get_tensorboard_path()))[TAG]
    assert written == [(s, float(np.float32(v))) for s, v in expected]


class TwoOptimizers(CbTrial):
    """CbTrial plus an Adam with two param groups on a second model (never stepped)."""

    def __init__(self, context: pytorch.PyTorchTrialContext, callbacks: Any = None) -> None:
        super().__init__(context, callbacks)
        other = context.wrap_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)))
        groups = [{"params": other[0].parameters(), "lr": 0.1}, {"params": other[1].parameters(), "lr": 0.2}]
        self.adam = context.wrap_optimizer(torch.optim.Adam(groups))


def test_every_group_of_every_optimizer_is_named() -> None:
    monitor = LRMonitor()
    with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
        trial = TwoOptimizers(ctx)
        pytorch.Trainer(trial, ctx, callbacks=[monitor]).fit(max_length=pytorch.Batch(1))
    assert monitor.history[0] == (
        0,
        {"lr/optimizer0/group0": LR, "lr/optimizer1/group0": 0.1, "lr/optimizer1/group1": 0.2},
    )
