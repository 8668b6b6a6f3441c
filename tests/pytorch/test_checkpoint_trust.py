"""Loading a checkpoint runs no code from it unless the caller trusts it.

``state_dict.pth`` loads with ``weights_only=True``: det-lite's own checkpoints (RNG states
included) load that way and resume exactly; a tampered or foreign file is refused before any of
it runs, unless trusted (``trust=True``, ``$DET_LITE_TRUST_CHECKPOINTS=1``). The trial class is
imported from a checkpoint's ``code/`` only when trusted. State that would need unpickling is
refused when the checkpoint is written.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint, _rng
from tests.fixtures import cb_trial
from tests.fixtures.cb_trial import CbTrial
from tests.fixtures.resume_mlp import ResumeMLPTrial

TRUST_MESSAGE = r"set DET_LITE_TRUST_CHECKPOINTS=1 \(in Python: trust=True\)"
_HPARAMS = {"lr": 0.05, "global_batch_size": 4, "lr_step_mode": "STEP_EVERY_BATCH"}


@pytest.fixture(autouse=True)
def _untrusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_checkpoint.TRUST_ENV, raising=False)


def _fit(
    max_batches: int, latest: Optional[str] = None, trial_class: Any = ResumeMLPTrial, **fit: Any
) -> Tuple[Any, pytorch.TrainResult]:
    with pytorch.init(hparams=_HPARAMS, exp_conf={"reproducibility": {"experiment_seed": 3}}) as ctx:
        trial = trial_class(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches),
            validation_period=pytorch.Batch(4),
            latest_checkpoint=latest,
            **fit,
        )
    return trial, result


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


class _Payload:
    """Pickles as a call of ``exec`` that creates ``marker``: what a tampered file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.fixture
def checkpoint() -> Path:
    _, result = _fit(4)
    return Path(result.checkpoints[-1]["path"])


def _tamper(path: Path, marker: Path) -> None:
    state = torch.load(path / _checkpoint.STATE_FILE, weights_only=True)
    state["trainer"]["extra"] = _Payload(marker)
    torch.save(state, path / _checkpoint.STATE_FILE)


# --- det-lite's checkpoints load with weights_only=True -------------------------------------


def test_written_checkpoints_load_with_weights_only(checkpoint: Path) -> None:
    state = torch.load(checkpoint / _checkpoint.STATE_FILE, weights_only=True)
    (rng,) = state["rng"]
    assert isinstance(rng["python"]["state"], list) and len(rng["python"]["state"]) == 625
    assert isinstance(rng["numpy"]["keys"], list) and len(rng["numpy"]["keys"]) == 624
    assert rng["torch"].dtype == torch.uint8
    assert state["callbacks"]["counter"] == {"count": 4, "batch_idxs": [0, 1, 2, 3]}
    assert json.loads((checkpoint / _checkpoint.METADATA_FILE).read_text())["format_version"] == 2


def test_rng_states_round_trip_exactly_through_a_weights_only_load(tmp_path: Path) -> None:
    random.gauss(0.0, 1.0)  # fill both gaussian caches: they are part of the state
    np.random.standard_normal()
    torch.save(_rng.capture_rng_state(), tmp_path / "rng.pth")

    def draws() -> Tuple[Any, ...]:
        return (
            [random.random() for _ in range(3)],
            random.gauss(0.0, 1.0),
            np.random.standard_normal(4).tolist(),
            np.random.randint(0, 2**31, size=3).tolist(),
            torch.rand(4).tolist(),
        )

    expected = draws()
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    _rng.restore_rng_state(torch.load(tmp_path / "rng.pth", weights_only=True))
    assert draws() == expected


@pytest.mark.slow
def test_resume_from_a_weights_only_load_is_bit_identical(checkpoint: Path) -> None:
    straight, _ = _fit(8)
    resumed, _ = _fit(8, latest=str(checkpoint))
    assert _same_weights(straight.model, resumed.model)
    assert resumed.draws[-1].tolist() == straight.draws[-1].tolist()
    assert resumed.np_draws[-4:] == straight.np_draws[-4:]
    assert resumed.py_draws[-4:] == straight.py_draws[-4:]


# --- a file that needs unpickling is refused unless trusted ---------------------------------


def test_tampered_state_is_refused_and_never_runs(checkpoint: Path, tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    _tamper(checkpoint, marker)
    pattern = rf"state_dict.pth needs full unpickling.*GLOBAL exec .*{TRUST_MESSAGE}"
    with pytest.raises(_checkpoint.UntrustedCheckpointError, match=pattern):
        _checkpoint.read_checkpoint(str(checkpoint))
    with pytest.raises(_checkpoint.UntrustedCheckpointError, match=pattern):
        pytorch.load_trial_from_checkpoint_path(str(checkpoint), trial_class=ResumeMLPTrial)
    with pytest.raises(_checkpoint.UntrustedCheckpointError, match=pattern):
        _fit(8, latest=str(checkpoint))
    assert not marker.exists()


@pytest.mark.parametrize("opt_in", ["trust", "env", "torch_load_kwargs"])
def test_trusted_tampered_state_is_unpickled(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opt_in: str
) -> None:
    marker = tmp_path / "payload-ran"
    _tamper(checkpoint, marker)
    kwargs: Dict[str, Any] = {"trial_class": ResumeMLPTrial}
    if opt_in == "trust":
        kwargs["trust"] = True
    elif opt_in == "env":
        monkeypatch.setenv(_checkpoint.TRUST_ENV, "1")
    else:
        kwargs["torch_load_kwargs"] = {"weights_only": False}
    trial = pytorch.load_trial_from_checkpoint_path(str(checkpoint), **kwargs)
    assert marker.exists()  # full unpickling ran the payload: the opt-in is real
    state = torch.load(checkpoint / _checkpoint.STATE_FILE, weights_only=False)
    assert torch.equal(trial.model[0].weight, state["context"]["models_state_dict"][0]["0.weight"])


def test_trust_false_overrides_the_environment(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "payload-ran"
    _tamper(checkpoint, marker)
    monkeypatch.setenv(_checkpoint.TRUST_ENV, "1")
    with pytest.raises(_checkpoint.UntrustedCheckpointError):
        _checkpoint.read_checkpoint(str(checkpoint), trust=False)
    assert not marker.exists()


@pytest.mark.slow
def test_legacy_checkpoint_resumes_exactly_when_trusted(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints of det-lite before weights-only loading held RNG states as tuples with a
    numpy array: refused by default, resumed bit for bit when trusted."""
    state = torch.load(checkpoint / _checkpoint.STATE_FILE, weights_only=True)
    (rng,) = state["rng"]
    py, nu = rng["python"], rng["numpy"]
    rng["python"] = (py["version"], tuple(py["state"]), py["gauss"])
    rng["numpy"] = (
        nu["bit_generator"], np.array(nu["keys"], dtype=np.uint32), nu["pos"], nu["has_gauss"],
        nu["cached_gaussian"],
    )
    torch.save(state, checkpoint / _checkpoint.STATE_FILE)
    with pytest.raises(_checkpoint.UntrustedCheckpointError, match="numpy"):
        _fit(8, latest=str(checkpoint))
    straight, _ = _fit(8)
    monkeypatch.setenv(_checkpoint.TRUST_ENV, "1")
    resumed, _ = _fit(8, latest=str(checkpoint))
    assert _same_weights(straight.model, resumed.model)
    assert resumed.np_draws[-4:] == straight.np_draws[-4:]


# --- state that would need unpickling is refused when written -------------------------------


class _Stamp(pytorch.PyTorchCallback):
    def state_dict(self) -> Dict[str, Any]:
        return {"ok": [1, 2.0, "x", None, torch.ones(2)], "when": datetime.date(2024, 1, 2)}


def test_callback_state_needing_unpickling_is_refused_when_saved() -> None:
    class Trial(CbTrial):
        def build_callbacks(self) -> Dict[str, pytorch.PyTorchCallback]:
            return {"stamp": _Stamp()}

    pattern = (
        r"checkpoint state\['callbacks'\]\['stamp'\]\['when'\] is a datetime.date.*"
        r"state_dict\(\) of callback 'stamp'.*add_safe_globals"
    )
    with pytorch.init(hparams={"global_batch_size": 4}, exp_conf={}) as ctx:
        with pytest.raises(_checkpoint.UnloadableStateError, match=pattern):
            pytorch.Trainer(Trial(ctx), ctx).fit(max_length=pytorch.Batch(2))
    assert os.listdir(Path(os.environ["DET_LITE_HOME"]) / "checkpoints") == []


# --- the trial class comes from a checkpoint's code/ only when trusted ------------------------


def test_checkpoint_code_is_imported_only_when_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "det_lite_trust_probe_module"
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(cb_trial.__file__, src / f"{name}.py")
    monkeypatch.setattr(sys, "path", [str(src)] + sys.path)
    try:
        module = importlib.import_module(name)
        with pytorch.init(hparams={"global_batch_size": 4}, exp_conf={}) as ctx:
            trained = module.CbTrial(ctx)
            result = pytorch.Trainer(trained, ctx).fit(max_length=pytorch.Batch(3))
        path = Path(result.checkpoints[-1]["path"])
        marker = tmp_path / "checkpoint-code-ran"
        with open(path / "code" / f"{name}.py", "a") as f:
            f.write(f"\nopen({str(marker)!r}, 'w').close()\n")
        # The module is gone from the caller's environment: only the checkpoint has it.
        del sys.modules[name]
        sys.path.remove(str(src))
        shutil.rmtree(src)
        importlib.invalidate_caches()

        with pytest.raises(ImportError, match=r"pass trial_class= explicitly, or.*trust=True"):
            pytorch.load_trial_from_checkpoint_path(str(path))
        assert not marker.exists() and name not in sys.modules
        assert str(path / "code") not in sys.path

        loaded = pytorch.load_trial_from_checkpoint_path(str(path), trial_class=CbTrial)
        assert type(loaded) is CbTrial and not marker.exists()
        assert torch.equal(loaded.model.weight, trained.model.weight)

        loaded = pytorch.load_trial_from_checkpoint_path(str(path), trust=True)
        assert marker.exists()
        code_file = type(loaded).__init__.__code__.co_filename  # imported from the checkpoint,
        assert os.path.realpath(code_file) == os.path.realpath(path / "code" / f"{name}.py")
        assert name not in sys.modules and str(path / "code") not in sys.path  # and forgotten
        assert type(loaded).__name__ == "CbTrial" and type(loaded) is not module.CbTrial
        assert torch.equal(loaded.model.weight, trained.model.weight)
    finally:
        sys.modules.pop(name, None)
