"""CheckLoss: a NaN or infinite loss stops the trial at its batch, before it reaches the weights."""

from __future__ import annotations

import math
from typing import Any, Dict

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch.callbacks import CheckLoss, NonFiniteLossError
from tests.fixtures.cb_trial import GAMMA, LR, W0, CbTrial, batch_xs
from tests.fixtures.linear import expected_weights


class PoisonedTrial(CbTrial):
    """CbTrial whose loss at batch ``bad_batch`` is multiplied by ``bad_value``."""

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        hp = self.context.get_hparams()
        if batch_idx == hp["bad_batch"]:
            loss = loss * hp["bad_value"]
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}


def _fit(bad_value: float, callbacks: Any) -> PoisonedTrial:
    with pytorch.init(hparams={"global_batch_size": 4, "bad_batch": 3, "bad_value": bad_value}) as ctx:
        trial = PoisonedTrial(ctx)
        pytorch.Trainer(trial, ctx, callbacks=callbacks).fit(max_length=pytorch.Batch(6))
    return trial


@pytest.mark.parametrize("bad_value, shown", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_a_non_finite_loss_fails_naming_the_batch(bad_value: float, shown: str) -> None:
    with pytest.raises(pytorch.CallbackError) as info:
        with pytorch.init(hparams={"global_batch_size": 4, "bad_batch": 3, "bad_value": bad_value}) as ctx:
            trial = PoisonedTrial(ctx)
            pytorch.Trainer(trial, ctx, callbacks=[CheckLoss()]).fit(max_length=pytorch.Batch(6))
    assert isinstance(info.value.__cause__, NonFiniteLossError)
    assert f"the loss is {shown} at batch 3 (rank 0)" in str(info.value)
    assert "'CheckLoss'" in str(info.value) and "on_before_backward" in str(info.value)
    # No gradient was computed from it: the weight is the one after batch 2.
    after_batch_2 = expected_weights(W0, [LR * GAMMA**i for i in range(3)], batch_xs(3))[-1]
    assert trial.model.weight.item() == pytest.approx(after_batch_2, rel=1e-12)
    assert trial.model.weight.grad is None


def test_without_it_the_nan_reaches_the_weights() -> None:
    # What CheckLoss prevents (and proof that the poisoned batch is really poisoned).
    trial = _fit(math.nan, [])
    assert math.isnan(trial.model.weight.item())


def test_finite_losses_pass() -> None:
    trial = _fit(1.0, [CheckLoss()])
    assert math.isfinite(trial.model.weight.item())
