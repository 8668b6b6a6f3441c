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
