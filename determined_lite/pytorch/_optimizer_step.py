"""``context.step_optimizer``: one optimizer step at the end of an aggregation window, with its
gradient communication, AMP unscaling, averaging, clipping, zeroing, hooks and LR steps."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch

from determined_lite.pytorch._harness import TrialHarness, WrappedOptimizer
from determined_lite.pytorch._hooks import Hook

ClipGrads = Callable[[Iterable[torch.nn.Parameter]], None]


def step_optimizer(
    harness: TrialHarness,
    optimizer: torch.optim.Optimizer,
    clip_grads: Optional[ClipGrads],
    auto_zero_grads: bool,
    scaler: Optional[Any],
) -> None:
    """Step ``optimizer`` on the last batch of each aggregation window; a no-op otherwise
    (the arguments are checked on every batch)."""
    wrapped = harness.find_optimizer(optimizer)
    if wrapped is None:
        raise ValueError(
            "step_optimizer() got an optimizer that was not returned by context.wrap_optimizer()"
        )
    k = harness.state.aggregation_frequency
    if not auto_zero_grads and k > 1:
        raise ValueError(
            "step_optimizer(auto_zero_grads=False) cannot be used with "
            f"optimizations.aggregation_frequency={k}: the harness must zero gradients after "
            "each aggregated step"
        )
    harness.precision.check_scaler(scaler)
    if not harness.state.is_step_batch():
        return
    opt = wrapped.optimizer
    if not wrapped.has_gradients():
        wrapped.warn_once(
            "no_gradients",
            f"step_optimizer() stepped {type(opt).__name__} with no gradients: call "
            "context.backward(loss) before step_optimizer() in train_batch",
        )
    harness.distributed.synchronize(opt)
    harness.precision.unscale(opt, scaler)
    _prepare_gradients(harness, wrapped, clip_grads)
    _step(harness, wrapped, scaler, auto_zero_grads)


def _prepare_gradients(
    harness: TrialHarness, wrapped: WrappedOptimizer, clip_grads: Optional[ClipGrads]
) -> None:
    """Average the window's gradients (when aggregating), clip them, then on_before_optimizer_step;
    the parameter list is only built when one of them needs it."""
    k = harness.state.aggregation_frequency
    average = k > 1 and harness.average_aggregated_gradients
    if not (average or clip_grads is not None or harness.callbacks.has(Hook.ON_BEFORE_OPTIMIZER_STEP)):
        return
    params = wrapped.parameters()
    if average:
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_div_(grads, float(k))
    if clip_grads is not None:
        clip_grads(params)
    harness.callbacks.call(Hook.ON_BEFORE_OPTIMIZER_STEP, params)


def _step(
    harness: TrialHarness, wrapped: WrappedOptimizer, scaler: Optional[Any], auto_zero_grads: bool
) -> None:
    """The step itself (through the engine and the scaler), zeroing, and the LR steps it triggers."""
    opt, callbacks = wrapped.optimizer, harness.callbacks
    wrapped.stepping = True
    try:
        with harness.distributed.step_context(opt):
            harness.precision.step(opt, scaler)
    finally:
        wrapped.stepping = False
    callbacks.call(Hook.ON_AFTER_OPTIMIZER_STEP, opt)
    if auto_zero_grads:
        callbacks.call(Hook.ON_BEFORE_OPTIMIZER_ZERO_GRAD, opt)
        opt.zero_grad()
        callbacks.call(Hook.ON_AFTER_OPTIMIZER_ZERO_GRAD, opt)
    wrapped.steps += 1
    harness.lr.after_optimizer_step(wrapped.owns, wrapped.steps, callbacks)
