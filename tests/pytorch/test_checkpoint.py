"""Checkpoints on disk: layout and metadata, atomic writes, clear read errors, and rebuilding a
trial from a checkpoint directory."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

import determined_lite
from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint
from tests.fixtures import cb_trial
from tests.fixtures.cb_trial import CbTrial
from tests.fixtures.resume_mlp import ResumeMLPTrial


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("DET_LITE_HOME", str(path))
    return path


def _fit(
    trial_class: Any = CbTrial,
    *,
    max_batches: int = 6,
    checkpoint_period: Optional[int] = None,
    exp_conf: Optional[Dict[str, Any]] = None,
    hparams: Optional[Dict[str, Any]] = None,
    trial_info: Optional[pytorch.TrialInfo] = None,
) -> Tuple[Any, pytorch.TrainResult]:
    conf = {"reproducibility": {"experiment_seed": 5}, **(exp_conf or {})}
    with pytorch.init(
        hparams=hparams or {"global_batch_size": 4}, exp_conf=conf, trial_info=trial_info
    ) as ctx:
        trial = trial_class(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches),
            checkpoint_period=pytorch.Batch(checkpoint_period) if checkpoint_period else None,
        )
    return trial, result


# --- layout ---------------------------------------------------------------------------------


def test_layout_and_metadata(home: Path) -> None:
    trial, result = _fit(
        max_batches=6,
        checkpoint_period=2,
        trial_info=pytorch.TrialInfo(trial_id=7, experiment_id=3),
    )
    root = home / "checkpoints"
    assert [c["total_batches"] for c in result.checkpoints] == [2, 4, 6]
    uuids = [c["uuid"] for c in result.checkpoints]
    assert len(set(uuids)) == 3
    # Exactly the three complete checkpoints; no temporary directory left behind.
    assert sorted(os.listdir(root)) == sorted(uuids)
    for c in result.checkpoints:
        assert c["path"] == str(root / c["uuid"])

    last = Path(result.checkpoints[-1]["path"])
    assert sorted(os.listdir(last)) == ["code", "metadata.json", "state_dict.pth"]
    meta = json.loads((last / "metadata.json").read_text())
    assert meta["trial_id"] == 7
    assert meta["experiment_id"] == 3
    assert meta["total_batches"] == 6
    assert meta["epochs"] == 1.5  # 6 batches of an epoch of 4
    assert meta["framework"] == f"torch-{torch.__version__}"
    assert meta["determined_lite_version"] == determined_lite.__version__
    assert meta["hparams"] == {"global_batch_size": 4}
    assert meta["trial_class"] == "tests.fixtures.cb_trial:CbTrial"
    assert meta["uuid"] == last.name
    first_meta = json.loads((Path(result.checkpoints[0]["path"]) / "metadata.json").read_text())
    assert first_meta["total_batches"] == 2 and first_meta["epochs"] == 0.5

    # code/ holds the trial's module file, byte for byte.
    assert os.listdir(last / "code") == ["cb_trial.py"]
    assert (last / "code" / "cb_trial.py").read_bytes() == Path(cb_trial.__file__).read_bytes()

    # state_dict.pth holds the weights that were trained.
    state, meta2 = _checkpoint.read_checkpoint(str(last))
    assert meta2 == meta
    assert torch.equal(state["context"]["models_state_dict"][0]["weight"], trial.model.weight.detach())


def test_context_dir_is_copied_without_hidden_files_caches_or_ignored_files(
    tmp_path: Path, home: Path
) -> None:
    ctx_dir = tmp_path / "context"
    (ctx_dir / "pkg" / "__pycache__").mkdir(parents=True)
    (ctx_dir / "model_def.py").write_text("# trial\n")
    (ctx_dir / "pkg" / "util.py").write_text("X = 1\n")
    (ctx_dir / "pkg" / "__pycache__" / "util.cpython.pyc").write_bytes(b"\0")
    (ctx_dir / ".secret").write_text("token")
    (ctx_dir / "weights.pth").write_bytes(b"\0" * 10)
    (ctx_dir / "data").mkdir()
    (ctx_dir / "data" / "train.csv").write_text("1,2\n")
    (ctx_dir / ".detignore").write_text("data/\n")
    _, result = _fit(max_batches=2, trial_info=pytorch.TrialInfo(context_dir=str(ctx_dir)))
    code = Path(result.checkpoints[-1]["path"]) / "code"
    files = sorted(str(p.relative_to(code)) for p in code.rglob("*") if p.is_file())
    assert files == ["model_def.py", os.path.join("pkg", "util.py"), "weights.pth"]


@pytest.mark.parametrize("storage_path", [None, "sub/dir"])
def test_checkpoint_storage_host_path_redirects_root(
    tmp_path: Path, home: Path, storage_path: Optional[str]
) -> None:
    storage: Dict[str, Any] = {"host_path": str(tmp_path / "elsewhere")}
    if storage_path:
        storage["storage_path"] = storage_path
    _, result = _fit(max_batches=2, exp_conf={"checkpoint_storage": storage})
    root = tmp_path / "elsewhere" / (storage_path or "")
    (ckpt,) = result.checkpoints
    assert Path(ckpt["path"]) == root / ckpt["uuid"]
    assert os.listdir(root) == [ckpt["uuid"]]
    assert (root / ckpt["uuid"] / "metadata.json").is_file()
    assert not (home / "checkpoints").exists()


# --- atomicity ------------------------------------------------------------------------------


def _failing_save(monkeypatch: pytest.MonkeyPatch, fail_on_call: int = 1) -> List[str]:
    """Make torch.save (as _checkpoint calls it, into an open file) write half a file and then
    fail with an OSError that is not about disk space."""
    real_save = torch.save
    calls: List[str] = []

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(f.name)
        if len(calls) < fail_on_call:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 half a zip file")
        raise OSError("Input/output error")

    monkeypatch.setattr(_checkpoint.torch, "save", save)
    return calls


def test_failed_save_leaves_nothing(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    calls = _failing_save(monkeypatch)
    shutdown: List[bool] = []

    class Shutdown(pytorch.PyTorchCallback):
        def on_trial_shutdown(self) -> None:
            shutdown.append(True)

    class Trial(CbTrial):
        def build_callbacks(self) -> Dict[str, pytorch.PyTorchCallback]:
            return {"shutdown": Shutdown()}

    with pytest.raises(OSError, match="Input/output error"):
        _fit(Trial, max_batches=2)
    root = home / "checkpoints"
    assert len(calls) == 1 and os.path.basename(os.path.dirname(calls[0])).startswith(".tmp-")
    assert os.listdir(root) == []  # neither <uuid>/ nor .tmp-<uuid>/
    assert shutdown == [True]


def test_failed_second_save_keeps_first_checkpoint(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    _failing_save(monkeypatch, fail_on_call=2)
    with pytest.raises(OSError):
        _fit(max_batches=4, checkpoint_period=2)
    root = home / "checkpoints"
    (only,) = os.listdir(root)
    assert not only.startswith(".")
    state, meta = _checkpoint.read_checkpoint(str(root / only))
    assert meta["total_batches"] == 2 and state["trainer"]["total_batches"] == 2


def test_failed_code_copy_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: Path) -> None:
    ctx_dir = tmp_path / "context"
    ctx_dir.mkdir()
    (ctx_dir / "data.bin").write_bytes(b"x" * 100)
    monkeypatch.setattr(_checkpoint, "MAX_CODE_BYTES", 50)
    with pytest.raises(ValueError, match="MiB"):
        _fit(max_batches=2, trial_info=pytorch.TrialInfo(context_dir=str(ctx_dir)))
    assert os.listdir(home / "checkpoints") == []


def test_write_checkpoint_direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uuid, path = _checkpoint.write_checkpoint(
        str(tmp_path / "root"), {"a": torch.arange(3)}, {"total_batches": 1}, None, checkpoint_uuid="fixed"
    )
    assert (uuid, path) == ("fixed", str(tmp_path / "root" / "fixed"))
    assert sorted(os.listdir(path)) == ["metadata.json", "state_dict.pth"]
    state, meta = _checkpoint.read_checkpoint(path)
    assert torch.equal(state["a"], torch.arange(3))
    assert meta["uuid"] == "fixed" and meta["total_batches"] == 1

    _failing_save(monkeypatch)
    with pytest.raises(OSError):
        _checkpoint.write_checkpoint(str(tmp_path / "root"), {}, {}, None, checkpoint_uuid="broken")
    assert os.listdir(tmp_path / "root") == ["fixed"]


# --- reading errors -------------------------------------------------------------------------


@pytest.fixture
def good_checkpoint(home: Path) -> Path:
    _, result = _fit(max_batches=2)
    return Path(result.checkpoints[-1]["path"])


def test_missing_directory(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"checkpoint directory .*nope.* does not exist"):
        _checkpoint.read_checkpoint(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pytorch.load_trial_from_checkpoint_path(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
            pytorch.Trainer(CbTrial(ctx), ctx).fit(max_length=pytorch.Batch(4), latest_checkpoint=missing)


@pytest.mark.parametrize("missing", ["metadata.json", "state_dict.pth"])
def test_missing_file(good_checkpoint: Path, tmp_path: Path, missing: str) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(good_checkpoint, broken)
    (broken / missing).unlink()
    pattern = rf"is not a complete determined_lite checkpoint: {missing} is missing"
    with pytest.raises(FileNotFoundError, match=pattern):
        _checkpoint.read_checkpoint(str(broken))
    with pytest.raises(FileNotFoundError, match=pattern):
        pytorch.load_trial_from_checkpoint_path(str(broken))
    with pytest.raises(FileNotFoundError, match=pattern):
        with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
            pytorch.Trainer(CbTrial(ctx), ctx).fit(max_length=pytorch.Batch(4), latest_checkpoint=str(broken))


def test_corrupt_metadata(good_checkpoint: Path) -> None:
    (good_checkpoint / "metadata.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        _checkpoint.read_checkpoint(str(good_checkpoint))


# --- load_trial_from_checkpoint_path --------------------------------------------------------


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


_MLP_HPARAMS = {"lr": 0.05, "global_batch_size": 4, "lr_step_mode": "STEP_EVERY_BATCH"}


@pytest.mark.slow
def test_load_trial_from_checkpoint_path() -> None:
    trained, result = _fit(ResumeMLPTrial, max_batches=7, hparams=_MLP_HPARAMS)
    path = result.checkpoints[-1]["path"]
    loaded = pytorch.load_trial_from_checkpoint_path(path)
    assert type(loaded) is ResumeMLPTrial
    assert loaded.context.get_hparams() == _MLP_HPARAMS
    assert loaded.context.get_trial_seed() == 5
    _assert_same_weights(trained.model, loaded.model)
    # A freshly built trial has other weights, so the equality above came from the checkpoint.
    with pytorch.init(hparams=_MLP_HPARAMS, exp_conf={"reproducibility": {"experiment_seed": 5}}) as ctx:
        fresh = ResumeMLPTrial(ctx)
    assert not torch.equal(fresh.model[0].weight, trained.model[0].weight)

    explicit = pytorch.load_trial_from_checkpoint_path(path, trial_class=ResumeMLPTrial)
    assert type(explicit) is ResumeMLPTrial
    _assert_same_weights(trained.model, explicit.model)


def test_load_trial_with_explicit_class_when_module_is_gone(good_checkpoint: Path) -> None:
    meta_path = good_checkpoint / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["trial_class"] = "no_such_module_for_det_lite_tests:Gone"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ImportError, match="trial_class="):
        pytorch.load_trial_from_checkpoint_path(str(good_checkpoint))

    class Sub(CbTrial):
        def __init__(self, context: Any, scale: float) -> None:
            super().__init__(context)
            self.scale = scale

    loaded = pytorch.load_trial_from_checkpoint_path(
        str(good_checkpoint), trial_class=Sub, trial_kwargs={"scale": 2.0}
    )
    assert isinstance(loaded, Sub) and loaded.scale == 2.0
    state, _ = _checkpoint.read_checkpoint(str(good_checkpoint))
    assert torch.equal(loaded.model.weight, state["context"]["models_state_dict"][0]["weight"])
