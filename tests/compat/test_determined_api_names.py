"""Names Determined's trials use that det-lite lacked (issue 12, item 7): ``determined.LOG_FORMAT``,
``determined.errors``, ``determined.pytorch.to_device``, ``LRSchedulerStepMode``, and the context's
``get_tensorboard_writer`` / ``set_enable_tensorboard_logging`` / ``get_enable_tensorboard_logging``.
Before, each raised det-lite's "not provided by the alias" error."""

from __future__ import annotations

import glob
import logging
import os

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.compat import install_alias
from tests.fixtures.linear import LinearTrial


def test_module_level_names() -> None:
    install_alias()
    import determined as det
    import determined.errors as errors
    from determined import pytorch as det_pytorch

    logging.Formatter(det.LOG_FORMAT).format(logging.makeLogRecord({"msg": "x"}))
    assert det.LOG_FORMAT == "%(levelname)s: [%(process)s] %(name)s: %(message)s"
    assert issubclass(errors.InvalidDataTypeException, errors.InvalidExperimentException)
    assert issubclass(errors.InvalidExperimentException, BaseException)
    assert not issubclass(errors.InvalidExperimentException, Exception)  # as in Determined
    assert det_pytorch.LRSchedulerStepMode is pytorch.LRScheduler.StepMode
    moved = det_pytorch.to_device({"a": [np.ones(2, dtype=np.float32)], "b": ("text", 3)}, "cpu")
    assert torch.equal(moved["a"][0], torch.ones(2)) and moved["b"] == ("text", 3)


@pytest.mark.slow
def test_tensorboard_writer_and_switch(tmp_path) -> None:
    with pytorch.init(hparams={"lr": 0.01, "global_batch_size": 2}) as ctx:
        assert ctx.get_enable_tensorboard_logging() is True
        writer = ctx.get_tensorboard_writer()
        assert writer is ctx.get_tensorboard_writer()  # one per trial
        writer.add_scalar("gan/loss", 1.5, 0)
        path = ctx.get_tensorboard_path()
        with pytest.raises(AssertionError, match="must be a boolean"):
            ctx.set_enable_tensorboard_logging("no")  # type: ignore[arg-type]
        ctx.set_enable_tensorboard_logging(False)
        trial = LinearTrial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(4), progress=False, record=False)
    # The writer was closed by init(): its event file is complete and holds only the user's
    # scalar, since automatic metric logging was switched off.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = glob.glob(os.path.join(path, "events.out.tfevents.*"))
    tags = set()
    for f in files:
        acc = EventAccumulator(f)
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    assert tags == {"gan/loss"}


# --- the rest of item 7 ----------------------------------------------------------------------


class _Positions(pytorch.PyTorchCallback):
    """What the context says about the current batch at the trial's hooks."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.seen: list = []

    def on_train_batch_end(self, metrics, batch_idx) -> None:  # type: ignore[no-untyped-def]
        ctx = self.context
        self.seen.append((ctx.current_train_batch(), ctx.current_train_epoch(), ctx.get_initial_batch()))


class _PositionTrial(LinearTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.positions = _Positions(context)
        self.initial_at_loader: list = []

    def build_training_data_loader(self) -> pytorch.DataLoader:
        self.initial_at_loader.append(self.context.get_initial_batch())
        return super().build_training_data_loader()

    def build_callbacks(self) -> dict:
        return {"positions": self.positions}


HP = {"lr": 0.01, "global_batch_size": 2, "dataset_size": 8}


def test_current_train_batch_before_training_raises_internal_exception() -> None:
    # Determined's context: current_train_batch(), current_train_epoch(), is_epoch_start() and
    # is_epoch_end() raise det.errors.InternalException("Training hasn't started.") until the
    # first training batch. det-lite returned 0 (and RuntimeError for the epoch methods).
    install_alias()
    import determined as det

    with pytorch.init(hparams=HP, enable_tensorboard_logging=False) as ctx:
        trial = _PositionTrial(ctx)
        for ask in (ctx.current_train_batch, ctx.current_train_epoch, ctx.is_epoch_start, ctx.is_epoch_end):
            with pytest.raises(det.errors.InternalException, match="Training hasn't started"):
                ask()
            with pytest.raises(RuntimeError):  # det-lite's earlier type, kept
                ask()
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(6), progress=False, record=False)
    # 4 batches per epoch (8 records, batch 2): batch index and epoch from the context.
    assert [(b, e) for b, e, _ in trial.positions.seen] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]


def test_get_initial_batch_is_the_resumed_checkpoints_batch(tmp_path) -> None:
    # Determined: context.get_initial_batch() is the number of batches the trial had trained
    # when it (re)started, already known when the data loaders are built.
    conf = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    with pytorch.init(hparams=HP, exp_conf=conf, enable_tensorboard_logging=False) as ctx:
        first = _PositionTrial(ctx)
        result = pytorch.Trainer(first, ctx).fit(max_length=pytorch.Batch(3), progress=False, record=False)
    assert first.initial_at_loader == [0] and {i for _, _, i in first.positions.seen} == {0}
    with pytorch.init(hparams=HP, exp_conf=conf, enable_tensorboard_logging=False) as ctx:
        second = _PositionTrial(ctx)
        pytorch.Trainer(second, ctx).fit(
            max_length=pytorch.Batch(5),
            latest_checkpoint=result.latest_checkpoint,
            progress=False,
            record=False,
        )
    assert second.initial_at_loader == [3]
    assert second.positions.seen == [(3, 0, 3), (4, 1, 3)]


def test_get_tensorboard_path_is_a_path() -> None:
    import pathlib

    # Determined: get_tensorboard_path() returns a pathlib.Path (trials write `path / "name"`).
    with pytorch.init(hparams=HP) as ctx:
        path = ctx.get_tensorboard_path()
        assert isinstance(path, pathlib.Path) and path.is_absolute()


def test_autocast_forward_pass() -> None:
    # Determined's context.autocast_forward_pass(model): the forward pass runs under autocast and
    # half-precision outputs come back as float32, so the loss is computed in full precision.
    seen = []

    class Probe(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            seen.append(torch.is_autocast_enabled("cpu"))
            return super().forward(x)

    with pytorch.init(hparams=HP, enable_tensorboard_logging=False) as ctx:
        model = Probe(3, 1, bias=False)
        with torch.no_grad():
            model.weight.copy_(torch.tensor([[1 / 3, 1 / 7, 1 / 11]]))
        x = torch.tensor([[1.1, 2.3, 3.7]])
        full = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            reduced = model(x)
        wrapped = ctx.autocast_forward_pass(model)
        out = wrapped(x)
    assert seen == [False, True, True]
    assert reduced.dtype == torch.bfloat16 and out.dtype == torch.float32
    assert torch.equal(out, reduced.float()) and not torch.equal(out, full)  # bfloat16 maths
