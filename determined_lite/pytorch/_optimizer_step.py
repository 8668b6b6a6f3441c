"""``context.step_optimizer``: one optimizer step at the end of an aggregation window, with its
gradient communication, AMP unscaling, averaging, clipping, zeroing, hooks and LR steps."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch

from determined_lite.pytorch._harness import TrialHarness, WrappedOptimizer
from determined_lite.pytorch._hooks import Hook

ClipGrads = Callable[[Iterable[torch.nn.Parameter]], None]
_TORCH_ZERO_GRAD = torch.optim.Optimizer.zero_grad
try:  # torch's global step hooks (torch.optim.optimizer.register_optimizer_step_*_hook)
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
except ImportError:  # another torch: every step goes through optimizer.step()
    _global_optimizer_pre_hooks = _global_optimizer_post_hooks = None  # type: ignore[assignment]


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
            harness.precision.step(opt, scaler, lambda: step_unscoped(wrapped))
    finally:
        wrapped.stepping = False
    callbacks.call(Hook.ON_AFTER_OPTIMIZER_STEP, opt)
    if auto_zero_grads:
        callbacks.call(Hook.ON_BEFORE_OPTIMIZER_ZERO_GRAD, opt)
        zero_grads(wrapped)
        callbacks.call(Hook.ON_AFTER_OPTIMIZER_ZERO_GRAD, opt)
    wrapped.steps += 1
    harness.lr.after_optimizer_step(wrapped.owns, wrapped.steps, callbacks)


def zero_grads(wrapped: WrappedOptimizer) -> None:
    """``optimizer.zero_grad()``: for torch's own (``set_to_none``), the same ``None`` gradients
    without the profiler scope it opens around them. With :func:`step_unscoped`, ~215,000 fewer
    instructions a batch on the search measure's MLP (6.5 %; ``benchmarks/batch_instructions.py``).
    An optimizer class with its own ``zero_grad`` (Horovod's), a patched one, or a recording
    profiler gets the call itself."""
    optimizer = wrapped.optimizer
    if type(optimizer).zero_grad is not _TORCH_ZERO_GRAD or torch.autograd._profiler_enabled():
        optimizer.zero_grad()
        return
    for p in wrapped.parameters():
        p.grad = None


def step_unscoped(wrapped: WrappedOptimizer) -> None:
    """``optimizer.step()`` without the profiler scope torch's step wrapper opens on every batch
    when nothing else the wrapper does is needed: no step hooks but det-lite's own (a warning
    for steps taken outside ``step_optimizer``), no recording profiler. An LR scheduler's
    counter on the instance (``_opt_called``) is set as its wrapper would; any other instance
    ``step`` is called."""
    opt = wrapped.optimizer
    cls_step = type(opt).step
    raw = getattr(cls_step, "__wrapped__", None)
    own = opt.__dict__.get("step")
    if (
        raw is None
        or not getattr(cls_step, "hooked", False)
        or (own is not None and not getattr(own, "_wrapped_by_lr_sched", False))
        or torch.autograd._profiler_enabled()
        or _other_step_hooks(wrapped)
    ):
        opt.step()
        return
    if own is not None:
        opt._opt_called = True  # type: ignore[attr-defined]
    raw(opt)
    opt._optimizer_step_code()


def _other_step_hooks(wrapped: WrappedOptimizer) -> bool:
    opt = wrapped.optimizer
    if _global_optimizer_pre_hooks is None or _global_optimizer_pre_hooks or _global_optimizer_post_hooks:
        return True
    if getattr(opt, "_optimizer_step_pre_hooks", True):
        return True
    post = getattr(opt, "_optimizer_step_post_hooks", None)
    return post is None or any(hook != wrapped.after_step for hook in post.values())
