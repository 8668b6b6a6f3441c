"""Metrics in the forms Determined reports them: arrays, numpy values in callbacks, non-numeric
training metrics. Data as in test_reducer.py: record i is the number i; training batches of 2
in order ([0, 1], [2, 3], [4, 5] | ...), validation on 5 records in batches [0, 1], [2, 3], [4].
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.reduce_trials import IdTrial, ThreadGroup


class Seen(pytorch.PyTorchCallback):
    """What the reporting hooks receive."""

    def __init__(self) -> None:
        self.train: List[Tuple[Dict[str, Any], List[Dict[str, Any]]]] = []
        self.val: List[Dict[str, Any]] = []

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        self.train.append((dict(avg_metrics), list(batch_metrics)))

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.val.append(dict(metrics))


class Recorded(IdTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.seen = Seen()

    def build_callbacks(self) -> Dict[str, pytorch.PyTorchCallback]:
        return {"seen": self.seen}


def fit(
    trial_cls: Type[Recorded],
    exp_conf: Optional[Dict[str, Any]] = None,
    distributed: Any = None,
    **fit_kwargs: Any,
) -> Tuple[Any, pytorch.TrainResult]:
    conf = {"reproducibility": {"experiment_seed": 1}, **(exp_conf or {})}
    hp = {"global_batch_size": 2, "val_size": 5}
    init = pytorch.init(hparams=hp, exp_conf=conf, distributed=distributed, enable_tensorboard_logging=False)
    with init as ctx:
        trial = trial_cls(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(6),
            validation_period=pytorch.Batch(3),
            reporting_period=pytorch.Batch(3),
            **fit_kwargs,
        )
    return trial, result


def is_float(value: Any) -> bool:
    return isinstance(value, np.float64)  # a numpy value that is also a Python float


# --- arrays -----------------------------------------------------------------------------------


class Arrays(Recorded):
    """1-element metrics (``loss.reshape(1)``, a 1×1 numpy array), 2-vectors, and a reducer."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        wrap = context.wrap_reducer
        self.total = wrap(lambda v: np.array([float(sum(v))]), name="total", for_training=False)
        self.span = wrap(lambda v: np.array([min(v), max(v)]), name="span", for_training=False)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        (x,) = batch
        return {"loss": x.mean().reshape(1), "pair": torch.stack([x.min(), x.max()])}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        (x,) = batch
        self.total.update(len(x))
        for v in x.tolist():
            self.span.update(v)
        n = np.array([[float(len(x))]])
        return {"x2_mean": (x**2).mean().reshape(1), "n": n, "vec": torch.stack([x.min(), x.max()])}


def test_one_element_metrics_are_floats_and_can_be_the_searcher_metric() -> None:
    conf = {"searcher": {"metric": "x2_mean", "smaller_is_better": True}}
    trial, result = fit(Arrays, conf, checkpoint_policy="best")
    # Sample-weighted means of the batch values 0.5, 6.5, 16 (x2_mean) and 2, 2, 1 (n).
    expected = {"x2_mean": 6.0, "n": 1.8, "vec": [1.6, 2.4], "total": 5.0, "span": [0.0, 4.0]}
    assert [v["metrics"] for v in result.validation_metrics] == [expected, expected]
    assert all(type(v["metrics"][k]) is float for v in result.validation_metrics for k in ("x2_mean", "n"))
    assert result.best_validation == 6.0
    assert [c["total_batches"] for c in result.checkpoints] == [3, 6]  # improved at 3; the end
    # Training: chunks [0,1] [2,3] [4,5] and [6,7] [0,1] [2,3].
    assert [t["metrics"] for t in result.training_metrics] == [
        {"loss": 2.5, "pair": [2.0, 3.0]},
        {"loss": 9.5 / 3, "pair": [8 / 3, 11 / 3]},
    ]


def test_callbacks_get_numpy_values_not_lists() -> None:
    trial, _ = fit(Arrays)
    val = trial.seen.val[0]
    assert all(is_float(val[k]) for k in ("x2_mean", "n", "total"))
    for name, expected in (("vec", [1.6, 2.4]), ("span", [0.0, 4.0])):
        assert isinstance(val[name], np.ndarray) and val[name].tolist() == expected
    avg, batches = trial.seen.train[0]
    assert is_float(avg["loss"]) and avg["loss"] == 2.5
    assert isinstance(avg["pair"], np.ndarray) and avg["pair"].tolist() == [2.0, 3.0]
    assert [m["loss"] for m in batches] == [0.5, 2.5, 4.5] and all(is_float(m["loss"]) for m in batches)
    assert [m["pair"].tolist() for m in batches] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


# --- non-numeric training metrics ------------------------------------------------------------


class Tagged(Recorded):
    """Training metrics Determined reports without averaging them: strings, dicts, None; bools
    are averaged (as numpy does); a value missing (None) in some batches averages the others."""

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        (x,) = batch
        return {
            "loss": x.mean(),
            "phase": "warmup" if batch_idx < 2 else "main",
            "info": {"batch": batch_idx},
            "even": batch_idx % 2 == 0,
            "sometimes": float(batch_idx) if batch_idx % 3 else None,
        }


def test_non_numeric_training_metrics_are_reported_with_no_average() -> None:
    trial, result = fit(Tagged)
    assert [t["metrics"] for t in result.training_metrics] == [
        {"loss": 2.5, "phase": None, "info": None, "even": 2 / 3, "sometimes": 1.5},
        {"loss": 9.5 / 3, "phase": None, "info": None, "even": 1 / 3, "sometimes": 4.5},
    ]
    avg, batches = trial.seen.train[0]
    assert avg["phase"] is None and avg["info"] is None
    assert [m["phase"] for m in batches] == ["warmup", "warmup", "main"]
    assert [m["info"] for m in batches] == [{"batch": 0}, {"batch": 1}, {"batch": 2}]
    assert [m.get("sometimes") for m in batches] == [None, 1.0, 2.0]


def test_non_numeric_validation_metrics_stay_an_error() -> None:
    class T(Recorded):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            return {"x2_mean": 1.0, "phase": "eval"}

    with pytest.raises(TypeError, match=r"validation metric 'phase' has a value of type str"):
        fit(T)


def test_non_numeric_training_metrics_on_two_ranks_are_each_workers_own() -> None:
    def rank(r: int, ctx: Any) -> Any:
        return fit(Tagged, distributed=ctx)[0].seen.train

    for train in ThreadGroup(2).run(rank):
        avg, batches = train[0]
        # Each rank trains one record of every global batch: the loss is averaged over workers.
        assert avg["phase"] is None and avg["loss"] == 2.5
        assert [m["loss"] for m in batches] == [0.5, 2.5, 4.5]
        assert [m["phase"] for m in batches] == ["warmup", "warmup", "main"]
