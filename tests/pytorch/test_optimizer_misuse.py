"""Two optimizer mistakes are said once per trial (issue 16, item 5): ``step_optimizer`` with no
gradients (no ``backward`` before it), and ``optimizer.step()`` called by the trial itself.
Before, both went unnoticed: the first trains nothing, the second bypasses aggregation, AMP,
clipping and step-based LR scheduling."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.linear import LinearTrial

HP = {"lr": 0.01, "global_batch_size": 2}
CONF = {"reproducibility": {"experiment_seed": 1}}


class NoBackwardTrial(LinearTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.step_optimizer(self.opt)  # forgot context.backward(loss)
        return {"loss": loss}


class ManualStepTrial(LinearTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.opt.step()  # by hand, outside step_optimizer
        self.opt.zero_grad()
        return {"loss": loss}


def _warnings(caplog: pytest.LogCaptureFixture, trial_cls: type, k: int = 1) -> List[str]:
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        with pytorch.init(hparams=HP, exp_conf=CONF, aggregation_frequency=k) as ctx:
            pytorch.Trainer(trial_cls(ctx), ctx).fit(max_length=pytorch.Batch(6))
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_step_without_backward_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    said = [m for m in _warnings(caplog, NoBackwardTrial) if "with no gradients" in m]
    assert said == [
        "step_optimizer() stepped SGD with no gradients: call context.backward(loss) before "
        "step_optimizer() in train_batch"
    ]


def test_manual_optimizer_step_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    said = [m for m in _warnings(caplog, ManualStepTrial) if "outside context.step_optimizer" in m]
    assert len(said) == 1 and said[0].startswith("SGD.step() was called outside context.step_optimizer()")


def test_a_correct_trial_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    said = _warnings(caplog, LinearTrial, k=2)
    assert not [m for m in said if "step_optimizer" in m], said
