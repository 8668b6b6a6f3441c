"""Checkpoints written by Determined itself (issue 12, item 13): det-lite reads the layouts of
0.13 to 0.38 as Determined's harness does (tests/fixtures/determined_ckpts.py writes them).
Before, load_trial_from_checkpoint_path and resuming refused them (no det-lite metadata)."""

from __future__ import annotations

import os
import pickle
import random
from typing import Any, Dict, List

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch._checkpoint import UntrustedCheckpointError
from determined_lite.pytorch._determined_ckpt import (
    batches_trained,
    context_state,
    is_determined_checkpoint,
    read_determined_checkpoint,
)
from tests.fixtures.determined_ckpts import rng_state, sgd_state, write_current, write_legacy
from tests.fixtures.linear import LinearTrial, expected_weights

SPEC = "tests.fixtures.linear:LinearTrial"
HP = {"lr": 0.01, "global_batch_size": 2, "dataset_size": 8}


def current(tmp_path: Any, **kw: Any) -> str:
    args: Dict[str, Any] = dict(
        weights=[{"weight": torch.tensor([[1.5]], dtype=torch.float64)}],
        optimizers=[sgd_state(0.001)],
        trial_cls_spec=SPEC,
        hparams=HP,
        batches_trained=6,
    )
    args.update(kw)
    return write_current(os.path.join(str(tmp_path), "ckpt-uuid-1"), **args)


def test_load_trial_from_a_current_determined_checkpoint(tmp_path: Any) -> None:
    # Determined's load_trial_from_checkpoint_path: trial class from load_data.json's
    # trial_cls_spec, its hparams, weights from models_state_dict. det-lite loads it without
    # trust (weights_only=True with numpy's array types for the RNG state).
    path = current(tmp_path)
    assert is_determined_checkpoint(path) and batches_trained(path) == 6
    trial = pytorch.load_trial_from_checkpoint_path(path)
    assert isinstance(trial, LinearTrial)
    assert trial.model.weight.item() == 1.5
    assert trial.context.get_hparams() == HP


def test_load_trial_from_a_ddp_saved_checkpoint(tmp_path: Any) -> None:
    # Saved by a torch.distributed trial: the model is DDP-wrapped, keys start with "module.";
    # Determined consumes the prefix when loading into a plain model.
    path = current(tmp_path, weights=[{"module.weight": torch.tensor([[-2.0]], dtype=torch.float64)}])
    assert pytorch.load_trial_from_checkpoint_path(path).model.weight.item() == -2.0


def test_load_trial_from_a_0_13_era_checkpoint(tmp_path: Any) -> None:
    # model_state_dict / optimizer_state_dict / lr_scheduler, amp_state (apex: not loaded, said
    # once), workload_sequencer.pkl; the trial class is the config's entrypoint from the
    # metadata.json Checkpoint.download() writes.
    path = write_legacy(
        os.path.join(str(tmp_path), "old"),
        weights={"weight": torch.tensor([[0.25]], dtype=torch.float64)},
        optimizer=sgd_state(0.002),
        entrypoint=SPEC,
        hparams=HP,
        steps_completed=4,
    )
    assert is_determined_checkpoint(path) and batches_trained(path) == 4
    assert pytorch.load_trial_from_checkpoint_path(path).model.weight.item() == 0.25


def test_det_lite_checkpoints_are_not_taken_for_determined_ones(tmp_path: Any) -> None:
    conf = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    with pytorch.init(hparams=HP, exp_conf=conf, enable_tensorboard_logging=False) as ctx:
        result = pytorch.Trainer(LinearTrial(ctx), ctx).fit(
            max_length=pytorch.Batch(2), progress=False, record=False
        )
    assert not is_determined_checkpoint(result.latest_checkpoint)


class _FirstDraw(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.draws: List[float] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.draws.append(random.random())


class DrawTrial(LinearTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.first = _FirstDraw()

    def build_callbacks(self) -> dict:
        return {**super().build_callbacks(), "first": self.first}


def _fit(path: str, max_batches: int, **fit_kw: Any) -> tuple:
    with pytorch.init(hparams=HP, enable_tensorboard_logging=False) as ctx:
        trial = DrawTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches), progress=False, record=False, **fit_kw
        )
    return trial, result


def _draw_after(seed: int) -> float:
    rng_state(seed)
    return random.random()


def test_resume_from_a_determined_checkpoint(tmp_path: Any) -> None:
    # Determined resumes a trial from its latest checkpoint: models, optimizers (here lr 0.001,
    # not the hparam's 0.01), LR schedulers, scaler, callbacks and RNG states, and goes on
    # from batches_trained (trial_state.pkl).
    path = current(tmp_path, seed=11)
    trial, result = _fit(path, 8, latest_checkpoint=path)
    assert trial.opt.param_groups[0]["lr"] == 0.001
    assert trial.context.get_initial_batch() == 6 and result.total_batches == 8
    # batches 6 and 7 of 4-batch epochs: x = [5, 6] then [7, 8], from w = 1.5
    assert trial.recorder.weights == pytest.approx(expected_weights(1.5, 0.001, [[5, 6], [7, 8]]))
    assert trial.first.draws[0] == _draw_after(11)


def test_warm_start_from_a_determined_checkpoint(tmp_path: Any) -> None:
    # Determined's warm start loads the source checkpoint as the new trial's latest one, with
    # the trial's own progress reset: weights, optimizer state and RNG restored, batch 0.
    path = current(tmp_path, seed=12)
    trial, result = _fit(path, 4, warm_start=path)
    assert trial.opt.param_groups[0]["lr"] == 0.001
    assert trial.context.get_initial_batch() == 0 and result.total_batches == 4
    xs = [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert trial.recorder.weights == pytest.approx(expected_weights(1.5, 0.001, xs))
    assert trial.first.draws[0] == _draw_after(12)


def test_warm_start_from_a_det_lite_checkpoint_keeps_training_at_batch_zero(tmp_path: Any) -> None:
    conf = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    with pytorch.init(hparams={**HP, "w0": 0.5}, exp_conf=conf, enable_tensorboard_logging=False) as ctx:
        first = LinearTrial(ctx)
        source = pytorch.Trainer(first, ctx).fit(max_length=pytorch.Batch(3), progress=False, record=False)
    trained = first.recorder.weights[-1]
    trial, result = _fit(source.latest_checkpoint, 4, warm_start=source.latest_checkpoint)
    assert result.total_batches == 4
    xs = [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert trial.recorder.weights == pytest.approx(expected_weights(trained, 0.01, xs))


def test_scaler_and_schedulers_map_to_what_the_trial_wrapped(tmp_path: Any) -> None:
    scaler = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
              "_growth_tracker": 0}
    path = current(tmp_path, scaler=scaler, lr_schedulers=[{"step_size": 1, "last_epoch": 6}])
    ckpt = read_determined_checkpoint(path)
    state = context_state(ckpt, models=1, optimizers=1, lr_schedulers=1, scalers=1, amp_scaler=False,
                          optimizer_steps=6)
    assert state["scalers_state_dict"] == [scaler] and state["amp_scaler_state_dict"] is None
    assert state["lr_schedulers_state_dict"] == [{"step_size": 1, "last_epoch": 6}]
    assert state["optimizer_steps"] == [6]
    amp = context_state(ckpt, models=1, optimizers=1, lr_schedulers=1, scalers=0, amp_scaler=True,
                        optimizer_steps=0)
    assert amp["amp_scaler_state_dict"] == scaler


class Payload:
    def __reduce__(self) -> Any:
        return (os.getcwd, ())


def test_a_determined_checkpoint_that_needs_unpickling_is_refused_unless_trusted(tmp_path: Any) -> None:
    path = current(tmp_path, callbacks={"cb": Payload()})
    with pytest.raises(UntrustedCheckpointError, match="DET_LITE_TRUST_CHECKPOINTS"):
        pytorch.load_trial_from_checkpoint_path(path)
    assert pytorch.load_trial_from_checkpoint_path(path, trust=True).model.weight.item() == 1.5


def test_progress_files_are_read_without_running_code(tmp_path: Any) -> None:
    path = current(tmp_path)
    with open(os.path.join(path, "trial_state.pkl"), "wb") as f:
        pickle.dump({"batches_trained": Payload()}, f)  # would call os.getcwd if unpickled fully
    assert batches_trained(path) == 6  # refused, so metadata.json's steps_completed
    np.testing.assert_equal(read_determined_checkpoint(path).batches_trained, 6)
