"""Precision plug-in: autocast, loss scaling, scaler steps and updates, checkpoint state."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch

from determined_lite.pytorch._precision import Precision


class RecordingScaler:
    """A GradScaler stand-in that records what the harness asks of it."""

    def __init__(self, name: str, calls: List[str]) -> None:
        self.name, self.calls, self.scale_value = name, calls, 4.0

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value

    def unscale_(self, optimizer: Any) -> None:
        self.calls.append(f"{self.name}.unscale_")

    def step(self, optimizer: Any) -> None:
        self.calls.append(f"{self.name}.step")
        optimizer.step()

    def update(self) -> None:
        self.calls.append(f"{self.name}.update")

    def state_dict(self) -> Dict[str, Any]:
        return {"scale": self.scale_value}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.scale_value = state["scale"]


def _optimizer() -> torch.optim.Optimizer:
    w = torch.nn.Parameter(torch.ones(1))
    w.grad = torch.ones(1)
    return torch.optim.SGD([w], lr=0.5)


def test_full_precision_is_the_identity() -> None:
    p = Precision(torch.device("cpu"))
    loss = torch.tensor(3.0)
    assert p.scale(loss) is loss
    with p.autocast():
        assert torch.get_autocast_dtype("cpu") is not None and not torch.is_autocast_enabled("cpu")
    opt = _optimizer()
    p.step(opt)
    assert opt.param_groups[0]["params"][0].item() == pytest.approx(0.5)
    assert p.state_dict() == {"scalers_state_dict": [], "amp_scaler_state_dict": None}


def test_use_amp_on_cpu_autocasts_to_bfloat16_without_a_scaler() -> None:
    p = Precision(torch.device("cpu"))
    p.enable_amp()
    assert p.amp_scaler is None  # bfloat16 needs no loss scaling
    with p.autocast():
        out = torch.nn.Linear(2, 2)(torch.ones(1, 2))
    assert out.dtype is torch.bfloat16


def test_trial_scalers_are_stepped_but_never_updated_by_the_harness() -> None:
    # Determined: with wrap_scaler the trial calls scaler.update() itself.
    calls: List[str] = []
    p = Precision(torch.device("cpu"))
    a, b = p.add_scaler(RecordingScaler("a", calls)), p.add_scaler(RecordingScaler("b", calls))
    opt1, opt2 = _optimizer(), _optimizer()
    p.unscale(opt2, b)
    p.step(opt2, b)
    p.step(opt1, a)
    p.update()
    assert calls == ["b.unscale_", "b.step", "a.step"]


def test_the_use_amp_scaler_is_stepped_and_updated_once_per_step_batch_by_the_harness() -> None:
    calls: List[str] = []
    p = Precision(torch.device("cpu"))
    p.amp_scaler = RecordingScaler("amp", calls)  # what enable_amp() creates on CUDA
    opt1, opt2 = _optimizer(), _optimizer()
    assert p.scale(torch.tensor(2.0)).item() == 8.0
    p.unscale(opt1)
    p.step(opt1)
    p.step(opt2)
    p.update()
    p.update()  # nothing stepped since the last update
    assert calls == ["amp.unscale_", "amp.step", "amp.step", "amp.update"]


def test_scalers_and_use_amp_exclude_each_other_and_scalers_must_be_wrapped() -> None:
    p = Precision(torch.device("cpu"))
    p.add_scaler(RecordingScaler("a", []))
    with pytest.raises(RuntimeError, match="cannot be combined with wrap_scaler"):
        p.enable_amp()
    with pytest.raises(ValueError, match="returned by context.wrap_scaler"):
        p.check_scaler(RecordingScaler("other", []))
    q = Precision(torch.device("cpu"))
    q.enable_amp()
    with pytest.raises(RuntimeError, match="cannot be combined with experimental.use_amp"):
        q.add_scaler(RecordingScaler("a", []))
    with pytest.raises(TypeError, match="needs a torch.amp.GradScaler"):
        q.add_scaler(object())


def test_scaler_state_round_trips() -> None:
    p = Precision(torch.device("cpu"))
    scaler = p.add_scaler(RecordingScaler("a", []))
    scaler.scale_value = 128.0
    state = p.state_dict()
    fresh = Precision(torch.device("cpu"))
    restored = fresh.add_scaler(RecordingScaler("a", []))
    fresh.load_state_dict(state, state["scalers_state_dict"])
    assert state == {"scalers_state_dict": [{"scale": 128.0}], "amp_scaler_state_dict": None}
    assert restored.scale_value == 128.0
