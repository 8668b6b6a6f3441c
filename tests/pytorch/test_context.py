"""PyTorchTrialContext: information, to_device, AMP and scalers, data-loader options, seeding."""

from __future__ import annotations

import collections
import math
import os
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from tests.fixtures.linear import expected_weights
from tests.fixtures.loop_trials import AmpTrial, NumpyTrial, PlainLoaderTrial, ScalerTrial, SeedTrial

LR = 0.01
SEED_CONF = {"reproducibility": {"experiment_seed": 1}}
HP = {"lr": LR, "global_batch_size": 2}


def run(
    trial_cls: Type[pytorch.PyTorchTrial],
    *,
    hparams: Optional[Dict[str, Any]] = None,
    k: int = 1,
    **fit_kwargs: Any,
) -> Tuple[Any, pytorch.TrainResult]:
    with pytorch.init(hparams={**HP, **(hparams or {})}, exp_conf=SEED_CONF, aggregation_frequency=k) as ctx:
        trial = trial_cls(ctx)
        result = pytorch.Trainer(trial, ctx).fit(**fit_kwargs)
    return trial, result


def xs(n: int) -> List[List[float]]:
    epoch = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
    return [epoch[i % 4] for i in range(n)]


def assert_close_seq(actual: List[float], expected: List[float]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert math.isclose(a, e, rel_tol=1e-12), (actual, expected)


# --- information ------------------------------------------------------------------------------


def test_to_device_converts_numpy_and_keeps_structure() -> None:
    Pair = collections.namedtuple("Pair", ["a", "b"])
    data = {
        "ints": np.arange(3),
        "nested": [
            torch.ones(2),
            (np.zeros((2, 2), dtype=np.float32), "label", 7),
            Pair(np.array([1.5]), torch.tensor([2])),
        ],
        "scalar": 3.0,
        "objects": np.array(["a", None], dtype=object),
    }
    with pytorch.init(hparams=HP, exp_conf=SEED_CONF) as ctx:
        out = ctx.to_device(data)
    assert set(out) == set(data)
    assert isinstance(out["ints"], torch.Tensor)
    assert out["ints"].dtype == torch.int64 and out["ints"].tolist() == [0, 1, 2]
    nested = out["nested"]
    assert type(nested) is list and len(nested) == 3
    assert torch.equal(nested[0], torch.ones(2))
    assert type(nested[1]) is tuple and len(nested[1]) == 3
    assert isinstance(nested[1][0], torch.Tensor)
    assert nested[1][0].dtype == torch.float32 and nested[1][0].shape == (2, 2)
    assert nested[1][0].abs().sum().item() == 0.0
    assert nested[1][1:] == ("label", 7)
    assert type(nested[2]) is Pair
    assert isinstance(nested[2].a, torch.Tensor) and nested[2].a.dtype == torch.float64
    assert nested[2].a.tolist() == [1.5] and nested[2].b.tolist() == [2]
    assert out["scalar"] == 3.0
    assert out["objects"] is data["objects"]  # object arrays cannot become tensors
    for t in (out["ints"], nested[0], nested[1][0], nested[2].a):
        assert t.device == torch.device("cpu")
    # The input is not modified in place.
    assert isinstance(data["ints"], np.ndarray) and isinstance(data["nested"][1][0], np.ndarray)


def test_hparams() -> None:
    with pytorch.init(hparams={"lr": 0.5, "global_batch_size": 4, "name": "x"}, exp_conf=SEED_CONF) as ctx:
        assert ctx.get_hparam("lr") == 0.5
        assert ctx.get_hparams() == {"lr": 0.5, "global_batch_size": 4, "name": "x"}
        ctx.get_hparams()["lr"] = 1.0  # a copy
        assert ctx.get_hparam("lr") == 0.5
        with pytest.raises(ValueError) as err:
            ctx.get_hparam("momentum")
    msg = str(err.value)
    assert "momentum" in msg
    for name in ("lr", "global_batch_size", "name"):
        assert repr(name) in msg


def test_hparams_from_exp_conf_when_not_given() -> None:
    conf = {**SEED_CONF, "hyperparameters": {"lr": 0.25, "global_batch_size": 8}}
    with pytorch.init(exp_conf=conf) as ctx:
        assert ctx.get_hparams() == {"lr": 0.25, "global_batch_size": 8}
        assert ctx.get_global_batch_size() == 8


def test_batch_sizes() -> None:
    with pytorch.init(hparams={"global_batch_size": 6}, exp_conf=SEED_CONF) as ctx:
        assert ctx.get_global_batch_size() == 6
        assert ctx.get_per_slot_batch_size() == 6  # one slot
    with pytorch.init(hparams={"lr": 0.1}, exp_conf=SEED_CONF) as ctx:
        for fn in (ctx.get_global_batch_size, ctx.get_per_slot_batch_size):
            with pytest.raises(ValueError, match="global_batch_size"):
                fn()
    for bad in (0, -2, 2.5, "8", True):
        with pytorch.init(hparams={"global_batch_size": bad}, exp_conf=SEED_CONF) as ctx:
            with pytest.raises(ValueError, match="global_batch_size"):
                ctx.get_global_batch_size()


def test_get_experiment_config_is_a_copy() -> None:
    conf = {**SEED_CONF, "data": {"path": "/data", "sizes": [1, 2]}}
    with pytorch.init(hparams=HP, exp_conf=conf) as ctx:
        conf["data"]["sizes"].append(3)  # the caller's dict changes afterwards
        got = ctx.get_experiment_config()
        assert got == {**SEED_CONF, "data": {"path": "/data", "sizes": [1, 2]}}
        got["data"]["sizes"].append(99)
        got["reproducibility"]["experiment_seed"] = 5
        assert ctx.get_experiment_config()["data"]["sizes"] == [1, 2]
        assert ctx.get_experiment_config()["reproducibility"]["experiment_seed"] == 1
        assert ctx.get_data_config() == {"path": "/data", "sizes": [1, 2]}


@pytest.mark.parametrize("seed", [0, 1234, 2**31 - 1])
def test_trial_seed_from_experiment_seed(seed: int) -> None:
    with pytorch.init(hparams=HP, exp_conf={"reproducibility": {"experiment_seed": seed}}) as ctx:
        assert ctx.get_trial_seed() == seed


def test_distributed_and_device_single_process() -> None:
    with pytorch.init(hparams=HP, exp_conf=SEED_CONF) as ctx:
        d = ctx.distributed
        assert (d.rank, d.size, d.local_rank) == (0, 1, 0)
        assert (d.get_rank(), d.get_size(), d.get_local_rank()) == (0, 1, 0)
        assert (d.cross_rank, d.cross_size, d.local_size) == (0, 1, 1)
        assert d.is_chief
        assert ctx.device == torch.device("cpu")
        model = ctx.wrap_model(torch.nn.Linear(2, 1))
        assert next(model.parameters()).device == torch.device("cpu")


def test_configure_apex_amp_is_not_implemented() -> None:
    with pytorch.init(hparams=HP, exp_conf=SEED_CONF) as ctx:
        with pytest.raises(NotImplementedError) as err:
            ctx.configure_apex_amp(models=None, optimizers=None)
    assert "wrap_scaler" in str(err.value)
    assert "use_amp" in str(err.value)


# --- AMP and scalers --------------------------------------------------------------------------


def test_use_amp_autocasts_train_and_eval_batches_on_cpu() -> None:
    trial, result = run(AmpTrial, hparams={"amp": True}, max_length=pytorch.Batch(3))
    assert trial.train_dtypes == [torch.bfloat16] * 3
    assert trial.eval_dtypes == [torch.bfloat16] * 2
    # Outside the harness's batches, no autocast: the same matmul is float32.
    x = torch.ones(2, 1)
    assert (x @ trial.model.weight.t()).dtype == torch.float32
    assert trial.model.weight.dtype == torch.float32
    assert trial.model.weight.item() != 0.0  # it trained
    assert result.total_batches == 3


def test_without_use_amp_batches_run_in_float32() -> None:
    trial, _ = run(AmpTrial, max_length=pytorch.Batch(2))
    assert trial.train_dtypes == [torch.float32] * 2
    assert trial.eval_dtypes == [torch.float32] * 2


@pytest.mark.parametrize("k, steps", [(1, 6), (3, 2)])
def test_wrapped_scaler_is_stepped_by_the_harness_updated_by_the_trial_and_checkpointed(
    k: int, steps: int
) -> None:
    # Determined's rule for wrap_scaler: the harness calls scaler.step(), the trial owns
    # scaler.update() (a second update by the harness fails: "No inf checks were recorded").
    trial, result = run(ScalerTrial, k=k, hparams={"k": k}, max_length=pytorch.Batch(6))
    # Scaled losses are unscaled before the step: the weights are those of plain SGD.
    weights = expected_weights(0.0, LR, xs(6), aggregation=k)
    assert_close_seq(trial.recorder.weights, weights)
    # clip_grads sees the unscaled mean gradient of each window (not 4x it).
    before = [0.0] + weights[:-1]
    grads = [sum(2 * x * (w * x - 2 * x) for x in b) / len(b) for w, b in zip(before, xs(6), strict=True)]
    assert_close_seq(trial.clip_grads_seen, [sum(grads[i : i + k]) / k for i in range(0, 6, k)])
    # The trial's update() once per optimizer step: init 4.0, doubles after every 4 good steps.
    expected_scale = 4.0 * 2 ** (steps // 4)
    assert trial.scaler.get_scale() == expected_scale
    assert trial.scaler._get_growth_tracker() == steps % 4
    path = os.path.join(result.checkpoints[-1]["path"], "state_dict.pth")
    state = torch.load(path, weights_only=False)
    saved = state["context"]["scalers_state_dict"]
    assert len(saved) == 1
    assert saved[0]["scale"] == expected_scale
    assert saved[0]["_growth_tracker"] == steps % 4
    assert saved[0]["growth_interval"] == 4


def test_wrapped_scaler_state_is_restored_on_resume() -> None:
    _, first = run(ScalerTrial, max_length=pytorch.Batch(5))
    trial, _ = run(ScalerTrial, max_length=pytorch.Batch(6), latest_checkpoint=first.checkpoints[-1]["path"])
    # 5 steps before (scale 8, tracker 1) + 1 step now: tracker 2, not 1 as from a fresh scaler.
    assert trial.scaler.get_scale() == 8.0
    assert trial.scaler._get_growth_tracker() == 2


def test_unwrapped_scaler_is_a_value_error() -> None:
    with pytorch.init(hparams=HP, exp_conf=SEED_CONF) as ctx:
        model = ctx.wrap_model(torch.nn.Linear(1, 1))
        opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=LR))
        ctx.harness.state.batch_idx = 0
        model(torch.ones(1, 1)).sum().backward()
        before = model.weight.detach().clone()
        with pytest.raises(ValueError, match="wrap_scaler"):
            ctx.step_optimizer(opt, scaler=torch.amp.GradScaler("cpu"))
        assert torch.equal(model.weight, before)  # nothing was stepped


def test_wrap_scaler_rejects_a_non_scaler() -> None:
    with pytorch.init(hparams=HP, exp_conf=SEED_CONF) as ctx:
        with pytest.raises(TypeError, match="GradScaler"):
            ctx.wrap_scaler(object())


# --- data -------------------------------------------------------------------------------------


def test_batches_are_moved_to_tensors_by_default() -> None:
    trial, _ = run(NumpyTrial, max_length=pytorch.Batch(3))
    assert trial.train_types == [torch.Tensor] * 3
    assert trial.eval_types == [torch.Tensor] * 2


def test_disable_auto_to_device_leaves_numpy_batches() -> None:
    trial, _ = run(NumpyTrial, hparams={"manual_device": True}, max_length=pytorch.Batch(6))
    assert trial.train_types == [np.ndarray] * 6
    assert trial.eval_types == [np.ndarray] * 2
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(6)))


def test_plain_torch_data_loader_needs_disabled_reproducibility_checks() -> None:
    with pytest.raises(TypeError, match="disable_dataset_reproducibility_checks"):
        run(PlainLoaderTrial, max_length=pytorch.Batch(2))
    # Allowed after the call; trains over more than one epoch on the plain loader.
    trial, result = run(PlainLoaderTrial, hparams={"disable_checks": True}, max_length=pytorch.Batch(10))
    assert result.total_batches == 10
    assert_close_seq(trial.recorder.weights, expected_weights(0.0, LR, xs(10)))


def test_plain_torch_data_loader_resumes_at_the_right_batch() -> None:
    hp = {"disable_checks": True}
    whole, _ = run(PlainLoaderTrial, hparams=hp, max_length=pytorch.Batch(10))
    _, first = run(PlainLoaderTrial, hparams=hp, max_length=pytorch.Batch(6))
    resumed, _ = run(
        PlainLoaderTrial,
        hparams=hp,
        max_length=pytorch.Batch(10),
        latest_checkpoint=first.checkpoints[-1]["path"],
    )
    assert resumed.recorder.weights == whole.recorder.weights[6:]


# --- seeding ----------------------------------------------------------------------------------


def _draws(seed: int) -> Tuple[List[float], List[float], float]:
    # Disturb every global RNG first: init() must reseed them.
    torch.rand(17)
    np.random.rand(17)
    import random

    random.random()
    with pytorch.init(hparams=HP, exp_conf={"reproducibility": {"experiment_seed": seed}}) as ctx:
        return SeedTrial(ctx).draws


def test_init_seeds_every_rng_before_the_trial_is_built() -> None:
    a, b, c = _draws(7), _draws(7), _draws(8)
    assert a == b
    torch_a, numpy_a, python_a = a
    torch_c, numpy_c, python_c = c
    assert torch_a != torch_c and numpy_a != numpy_c and python_a != python_c
    assert len(set(torch_a)) == 4  # real draws, not a constant
