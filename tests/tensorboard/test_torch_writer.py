"""TorchWriter and the harness's own TensorBoard output: both land in the trial's directory
under ``$DET_LITE_HOME/tensorboard/`` and hold exactly the reported metrics."""

from __future__ import annotations

import collections
import glob
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from determined_lite import pytorch, tensorboard
from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter
from tests.fixtures.cb_trial import CbTrial


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("DET_LITE_HOME", str(path))
    return path


def _event_files(path: str) -> List[str]:
    return sorted(glob.glob(os.path.join(path, "**", "events.out.tfevents.*"), recursive=True))


def _scalars(path: str) -> Dict[str, List[Tuple[int, float]]]:
    """Every scalar under ``path``, per tag as (step, value), read file by file."""
    out: Dict[str, List[Tuple[int, float]]] = collections.defaultdict(list)
    for f in _event_files(path):
        acc = EventAccumulator(f, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out[tag] += [(e.step, e.value) for e in acc.Scalars(tag)]
    return {tag: sorted(v) for tag, v in out.items()}


def _f32(x: float) -> float:
    """What a tfevent scalar (float32) holds for x."""
    return float(np.float32(x))


class WriteEveryBatch(pytorch.PyTorchCallback):
    def __init__(self, writer: TorchWriter) -> None:
        self.writer = writer

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.writer.add_scalar("custom/bidx", metrics["bidx"], batch_idx)


def _fit(ctx: pytorch.PyTorchTrialContext, callbacks: Optional[Dict[str, Any]] = None) -> pytorch.TrainResult:
    trial = CbTrial(ctx, callbacks)
    return pytorch.Trainer(trial, ctx).fit(
        max_length=pytorch.Batch(8),
        reporting_period=pytorch.Batch(2),
        validation_period=pytorch.Batch(4),
    )


def _assert_harness_scalars(scalars: Dict[str, List[Tuple[int, float]]], result: pytorch.TrainResult) -> None:
    for name in ("loss", "bidx"):
        assert scalars[f"training/{name}"] == [
            (m["total_batches"], _f32(m["metrics"][name])) for m in result.training_metrics
        ]
    assert scalars["validation/xmean"] == [
        (m["total_batches"], _f32(m["metrics"]["xmean"])) for m in result.validation_metrics
    ]
    # Exact expectations, independent of result: reports at 2, 4, 6, 8; validations at 4 and 8.
    assert scalars["training/bidx"] == [(2, 0.5), (4, 2.5), (6, 4.5), (8, 6.5)]
    assert scalars["validation/xmean"] == [(4, 3.5), (8, 3.5)]


def test_torch_writer_and_harness_write_to_trial_path(home: Path) -> None:
    with pytorch.init(
        hparams={"global_batch_size": 4}, exp_conf={"reproducibility": {"experiment_seed": 1}}
    ) as ctx:
        assert isinstance(ctx.get_tensorboard_path(), Path)  # as Determined's
        tb_path = str(ctx.get_tensorboard_path())
        assert Path(tb_path).parent == home / "tensorboard" / "local"
        assert tensorboard.get_base_path() == tb_path

        writer = TorchWriter()
        assert Path(writer.writer.log_dir) == Path(tb_path)
        result = _fit(ctx, {"tb": WriteEveryBatch(writer)})
        writer.add_scalar("custom/tensor", torch.tensor(1.25), 3)
        writer.add_scalar("custom/numpy", np.float64(2.5), 4)
        writer.add_scalar("custom/int", 7, 5)
        writer.reset()

    assert _event_files(tb_path), "no event files in the trial's tensorboard path"
    # Nothing was written elsewhere under the storage root.
    assert all(f.startswith(tb_path + os.sep) for f in _event_files(str(home)))
    scalars = _scalars(tb_path)
    _assert_harness_scalars(scalars, result)
    assert scalars["custom/bidx"] == [(i, float(i)) for i in range(8)]
    assert scalars["custom/tensor"] == [(3, 1.25)]
    assert scalars["custom/numpy"] == [(4, 2.5)]
    assert scalars["custom/int"] == [(5, 7.0)]
    assert set(scalars) == {
        "training/loss",
        "training/bidx",
        "validation/xmean",
        "custom/bidx",
        "custom/tensor",
        "custom/numpy",
        "custom/int",
    }


def test_trial_with_ids_writes_to_experiment_trial_path(home: Path) -> None:
    info = pytorch.TrialInfo(experiment_id=3, trial_id=7)
    with pytorch.init(hparams={"global_batch_size": 4}, trial_info=info) as ctx:
        expected = home / "tensorboard" / "experiment_3" / "trial_7"
        assert Path(ctx.get_tensorboard_path()) == expected
        writer = TorchWriter()
        writer.add_scalar("custom/x", 1.0, 0)
        writer.close()
        result = _fit(ctx)
    scalars = _scalars(str(expected))
    _assert_harness_scalars(scalars, result)
    assert scalars["custom/x"] == [(0, 1.0)]


def test_each_local_run_gets_its_own_path_and_active_path_is_restored(home: Path) -> None:
    before = tensorboard._active_path
    paths = []
    for _ in range(2):
        with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
            paths.append(str(ctx.get_tensorboard_path()))
            assert tensorboard.get_base_path() == paths[-1]
            _fit(ctx)
        assert tensorboard._active_path == before
    assert paths[0] != paths[1]
    for p in paths:
        assert _scalars(p)["training/bidx"] == [(2, 0.5), (4, 2.5), (6, 4.5), (8, 6.5)]


def test_tensorboard_logging_disabled_writes_nothing(home: Path) -> None:
    with pytorch.init(hparams={"global_batch_size": 4}, enable_tensorboard_logging=False) as ctx:
        assert ctx.get_tensorboard_path() is None
        _fit(ctx)
    assert not (home / "tensorboard").exists()


def test_torch_writer_explicit_log_dir(tmp_path: Path) -> None:
    target = tmp_path / "explicit" / "logs"
    writer = TorchWriter(log_dir=str(target))
    writer.add_scalar("a", torch.tensor([3.0]), 1)
    writer.add_scalar("a", 4.5, 2)
    writer.flush()
    assert _scalars(str(target)) == {"a": [(1, 3.0), (2, 4.5)]}
    writer.close()


def test_flat_hparams_names_nested_values_with_dots():
    from determined_lite.tensorboard.metric_writers.pytorch import flat_hparams

    opt = {"name": "sgd", "betas": [0.9, 0.99], "nesterov": True}
    hparams = {"lr": 0.1, "opt": opt, "skip": None, "n": 3}
    assert flat_hparams(hparams) == {
        "lr": 0.1,
        "opt.name": "sgd",
        "opt.betas": "[0.9, 0.99]",
        "opt.nesterov": True,
        "n": 3,
    }
