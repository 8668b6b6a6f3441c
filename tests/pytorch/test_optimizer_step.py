"""The optimizer step without torch's profiler scopes (issue 27): ``step_optimizer`` steps and
zeroes a torch optimizer exactly as ``optimizer.step()`` and ``optimizer.zero_grad()`` do, minus
the ``record_function`` scope each opens on every batch, unless something needs what those
calls do besides: step hooks (the user's, global ones), an LR scheduler's step counter, an
optimizer class with its own ``zero_grad``, or a profiler that records (which then sees both
scopes as before)."""

from __future__ import annotations

import warnings
from typing import Any, List

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from determined_lite import pytorch
from determined_lite.pytorch._harness import WrappedOptimizer
from determined_lite.pytorch._optimizer_step import step_unscoped, zero_grads
from tests.fixtures.linear import LinearTrial, expected_weights

HP = {"lr": 0.01, "global_batch_size": 2, "w0": 0.5}
CONF = {"reproducibility": {"experiment_seed": 1}}
XS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]] * 2  # 8 batches of the 8-record dataset


def _fit(batches: int = 8) -> LinearTrial:
    with pytorch.init(hparams=HP, exp_conf=CONF) as ctx:
        trial = LinearTrial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(batches))
    return trial


def _scopes(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The names of the profiler scopes opened from here on."""
    opened: List[str] = []
    enter = torch.autograd.profiler.record_function.__enter__

    def counting(self: Any) -> Any:
        opened.append(self.name)
        return enter(self)

    monkeypatch.setattr(torch.autograd.profiler.record_function, "__enter__", counting)
    return opened


def test_the_loop_opens_no_profiler_scope_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _scopes(monkeypatch)
    trial = _fit()
    assert trial.recorder.weights == pytest.approx(expected_weights(0.5, 0.01, XS), rel=1e-12)
    steps = [n for n in opened if n.startswith("Optimizer.")]
    assert steps == [], steps  # before: a step scope and a zero_grad scope on each of the 8 batches


def test_a_recording_profiler_sees_the_step_and_zero_grad_scopes() -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _fit(batches=3)
    names = [e.name for e in prof.events()]
    assert names.count("Optimizer.step#SGD.step") == 3
    assert names.count("Optimizer.zero_grad#SGD.zero_grad") == 3


def _model_and_adam(seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _train(model: torch.nn.Module, step: Any, zero: Any, batches: int = 5) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    for _ in range(batches):
        model(torch.randn(4, 5, generator=g)).square().mean().backward()
        step()
        zero()
    return [p.detach().clone() for p in model.parameters()]


def test_unscoped_steps_are_bit_identical_to_torchs() -> None:
    model_a, opt_a = _model_and_adam()
    model_b, opt_b = _model_and_adam()
    wrapped = WrappedOptimizer(opt_b, 1)
    wrapped.stepping = True
    ours = _train(model_b, lambda: step_unscoped(wrapped), lambda: zero_grads(wrapped))
    theirs = _train(model_a, opt_a.step, opt_a.zero_grad)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert all(p.grad is None for p in model_b.parameters())
    assert opt_a.state_dict()["state"][0]["step"] == opt_b.state_dict()["state"][0]["step"] == 5


def test_step_hooks_still_run() -> None:
    model, opt = _model_and_adam()
    wrapped = WrappedOptimizer(opt, 1)
    wrapped.stepping = True
    calls: List[str] = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    handle = register_optimizer_step_post_hook(lambda o, a, k: calls.append("global"))
    try:
        _train(model, lambda: step_unscoped(wrapped), lambda: zero_grads(wrapped), batches=2)
    finally:
        handle.remove()
    assert calls == ["pre", "post", "global"] * 2


def test_an_lr_scheduler_counts_the_steps_it_sees() -> None:
    model, opt = _model_and_adam()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    wrapped = WrappedOptimizer(opt, 1)
    wrapped.stepping = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()" would raise

        def step() -> None:
            step_unscoped(wrapped)
            sched.step()

        _train(model, step, lambda: zero_grads(wrapped), batches=3)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01 / 8)


class OwnZeroGrad(torch.optim.SGD):
    zeroed = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        type(self).zeroed += 1
        super().zero_grad(set_to_none)


def test_an_optimizers_own_zero_grad_is_called() -> None:
    model = torch.nn.Linear(2, 1)
    opt = OwnZeroGrad(model.parameters(), lr=0.1)
    OwnZeroGrad.zeroed = 0
    model(torch.ones(1, 2)).sum().backward()
    zero_grads(WrappedOptimizer(opt, 1))
    assert OwnZeroGrad.zeroed == 1 and all(p.grad is None for p in model.parameters())
