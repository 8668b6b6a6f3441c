"""A full checkpoint volume: one ``DiskFullError`` naming the checkpoint root, nothing half
written left behind, and the last complete checkpoint still resumes exactly.

The disk is filled by injection: the checkpoint's bytes go to ``/dev/full`` (a real ENOSPC from
the kernel, through torch's own writer) where it exists, else an ``OSError(ENOSPC)``.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest
import torch

from determined_lite import pytorch
from determined_lite._errors import ActionRequired, DiskFullError, is_disk_full
from determined_lite.pytorch import _checkpoint
from tests.fixtures.resume_mlp import ResumeMLPTrial

_HPARAMS = {"lr": 0.05, "global_batch_size": 4, "lr_step_mode": "STEP_EVERY_BATCH"}
DEV_FULL = "/dev/full"


def _fit(max_batches: int, latest: Optional[str] = None) -> Tuple[ResumeMLPTrial, pytorch.TrainResult]:
    with pytorch.init(hparams=_HPARAMS, exp_conf={"reproducibility": {"experiment_seed": 3}}) as ctx:
        trial = ResumeMLPTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches),
            checkpoint_period=pytorch.Batch(2),
            latest_checkpoint=latest,
        )
    return trial, result


def _fill_disk_from_save(monkeypatch: pytest.MonkeyPatch, call: int) -> List[str]:
    """From the ``call``-th ``torch.save`` of a checkpoint on, the disk is full."""
    real_save = torch.save
    calls: List[str] = []

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(f.name)
        if len(calls) < call:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 the first bytes fit")
        if os.path.exists(DEV_FULL):
            with open(DEV_FULL, "wb") as full:
                real_save(obj, full, *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_checkpoint.torch, "save", save)
    return calls


@pytest.mark.slow
def test_full_disk_stops_training_with_one_error_and_keeps_the_last_checkpoint(
    monkeypatch: pytest.MonkeyPatch, _det_lite_home: Path
) -> None:
    real_save = torch.save
    calls = _fill_disk_from_save(monkeypatch, call=2)
    root = _det_lite_home / "checkpoints"
    with pytest.raises(DiskFullError) as info:
        _fit(8)
    error = info.value
    assert str(error) == (
        f"no space left on {root}: the checkpoint at batch 4 could not be written (its partial "
        "files were removed; earlier checkpoints are intact)"
    )
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert isinstance(error, ActionRequired) and is_disk_full(error.__cause__)
    assert len(calls) == 2  # no retry
    (kept,) = os.listdir(root)  # the checkpoint at batch 2; no .tmp-* directory
    state, meta = _checkpoint.read_checkpoint(str(root / kept))
    assert meta["total_batches"] == 2 and state["trainer"]["total_batches"] == 2

    monkeypatch.setattr(_checkpoint.torch, "save", real_save)  # space freed: resume exactly
    straight, _ = _fit(8)
    resumed, _ = _fit(8, latest=str(root / kept))
    for name, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


def test_full_disk_while_copying_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``shutil.copytree`` reports its files' errors as text: still one DiskFullError."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "model_def.py").write_text("# trial\n")

    def copyfile(src: str, dst: str, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)

    monkeypatch.setattr(shutil, "copyfile", copyfile)  # what copytree's copy2 calls
    root = tmp_path / "ckpts"
    with pytest.raises(DiskFullError, match=rf"^no space left on {root}: the checkpoint at batch 1 "):
        _checkpoint.write_checkpoint(str(root), {"a": 1}, {"total_batches": 1}, str(context))
    assert os.listdir(root) == []


def test_full_disk_at_the_background_flush_removes_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "ckpts"
    uuid, path = _checkpoint.write_checkpoint(str(root), {"a": 1}, {"total_batches": 3}, None, durable=False)

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_checkpoint.os, "fsync", fsync)
    flush = _checkpoint.BackgroundFlush()
    flush.start(uuid, path)
    with pytest.raises(DiskFullError, match=rf"^no space left on {root}: checkpoint {uuid} could not be"):
        flush.wait()
    flush.close()
    assert os.listdir(root) == []  # a directory named by a uuid is always complete


def test_other_write_errors_are_not_disk_full(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(_checkpoint.torch, "save", save)
    with pytest.raises(OSError) as info:
        _checkpoint.write_checkpoint(str(tmp_path / "ckpts"), {}, {}, None)
    assert type(info.value) is OSError and info.value.errno == errno.EIO
