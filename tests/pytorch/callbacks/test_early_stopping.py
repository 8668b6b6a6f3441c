"""EarlyStopping: the decision rule, and the stop at the validated batch (no extra batch, the
final checkpoint is the validated one), also after a resume."""

from __future__ import annotations

import math
from typing import Any, List, Optional

import numpy as np
import pytest

from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint
from determined_lite.pytorch.callbacks import EarlyStopping
from tests.fixtures.cb_trial import Recorder, fit_cb_trial


class FakeContext:
    """What EarlyStopping uses of a context: the stop request, the batch count, the rank."""

    class distributed:  # noqa: N801 -- mirrors context.distributed
        is_chief = True

    class harness:  # noqa: N801
        said: List[str] = []
        say = said.append

        class state:  # noqa: N801
            batches_done = 0

    def __init__(self) -> None:
        self.stop: Optional[bool] = None

    def set_stop_requested(self, value: bool) -> None:
        self.stop = value


def decisions(cb: EarlyStopping, values: List[float]) -> List[bool]:
    """Feed ``values`` as successive validations; whether each one asked to stop."""
    ctx = FakeContext()
    cb.setup(ctx)
    out = []
    for v in values:
        ctx.stop = None
        cb.on_validation_end({"m": np.float64(v), "other": np.float64(0.0)})
        out.append(ctx.stop is True)
    return out


def test_stops_after_patience_validations_without_improvement() -> None:
    assert decisions(EarlyStopping("m", patience=2), [5, 4, 4, 3, 3.5, 3.0]) == [
        False, False, False, False, False, True  # fmt: skip
    ]
    # An improvement resets the count.
    assert decisions(EarlyStopping("m", patience=2), [5, 5, 4, 4, 4]) == [False, False, False, False, True]


def test_mode_max_and_min_delta() -> None:
    assert decisions(EarlyStopping("m", patience=1, mode="max"), [1, 2, 2]) == [False, False, True]
    # Better by 0.5 only: not by more than min_delta = 0.5.
    cb = EarlyStopping("m", patience=2, min_delta=0.5)
    assert decisions(cb, [10, 9.5, 9.6]) == [False, False, True]
    assert cb.best == 10 and cb.wait == 2
    assert decisions(EarlyStopping("m", patience=1, min_delta=0.5), [10, 9.4]) == [False, False]


def test_nan_never_improves() -> None:
    cb = EarlyStopping("m", patience=2)
    assert decisions(cb, [math.nan, math.nan]) == [False, True]
    assert cb.best is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"metric": ""}, "metric name"),
        ({"metric": "m", "patience": 0}, "patience"),
        ({"metric": "m", "mode": "down"}, r"mode.*\('min', 'max'\)"),
        ({"metric": "m", "min_delta": -1}, "min_delta"),
        ({"metric": "m", "min_delta": math.inf}, "min_delta"),
    ],
)
def test_bad_arguments(kwargs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EarlyStopping(**kwargs)


def test_a_missing_metric_names_the_ones_there() -> None:
    with pytest.raises(pytorch.CallbackError, match=r"EarlyStopping watches 'val_loss'.*\['xmean'\]"):
        fit_cb_trial(max_batches=2, validation=2, trainer_callbacks=[EarlyStopping("val_loss")])


def test_training_stops_at_the_validated_batch_with_its_checkpoint() -> None:
    # CbTrial's xmean is 3.5 at every validation: the first sets the best, the next 2 do not
    # improve it, so training stops at the third validation, after batch 6 of 16.
    early = EarlyStopping("xmean", patience=2)
    rec = Recorder("rec", [])
    _, result = fit_cb_trial({"rec": rec}, max_batches=16, validation=2, trainer_callbacks=[early])
    assert [v["total_batches"] for v in result.validation_metrics] == [2, 4, 6]
    assert result.stopped_early
    assert result.total_batches == 6 == early.stopped_at
    assert max(idx for _, idx in rec.args("on_train_batch_start")) == 5  # no extra batch
    last = result.checkpoints[-1]
    assert last["total_batches"] == 6 and last["metrics"] == {"xmean": 3.5}
    assert _checkpoint.read_metadata(last["path"])["total_batches"] == 6
    state, _ = _checkpoint.read_checkpoint(last["path"])
    assert state["callbacks"]["EarlyStopping"] == {"best": 3.5, "wait": 2}


def test_its_count_survives_a_resume() -> None:
    # Stopped by max_length after validations at 2 and 4 (wait = 1); resumed, the validation at
    # 6 is the second without improvement: stop there, as without the interruption.
    _, first = fit_cb_trial(
        max_batches=4, validation=2, trainer_callbacks=[EarlyStopping("xmean", patience=2)]
    )
    resumed = EarlyStopping("xmean", patience=2)
    _, result = fit_cb_trial(
        max_batches=16, validation=2, latest=first.checkpoints[-1]["path"], trainer_callbacks=[resumed]
    )
    assert resumed.best == 3.5
    assert result.total_batches == 6 and result.checkpoints[-1]["total_batches"] == 6
