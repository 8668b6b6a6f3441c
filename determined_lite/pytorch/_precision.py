"""Precision: the one object that knows about mixed precision and loss scaling.

The context and the loop call it at fixed points and carry no AMP branches of their own:
``autocast()`` around forward passes, ``scale(loss)`` before backward, ``unscale(optimizer)``
before gradients are averaged or clipped, ``step(optimizer)`` for the optimizer step, and
``update()`` once per optimizer-step batch. Two modes, with Determined's ownership rules:

- ``experimental.use_amp()``: the harness owns one ``GradScaler`` (CUDA, float16) or none (CPU,
  bfloat16 needs no scaling), autocasts ``train_batch``/``evaluate_batch``, and both steps and
  updates its scaler.
- ``wrap_scaler(scaler)``: the trial autocasts itself, scales its loss, passes the scaler to
  ``step_optimizer(opt, scaler=scaler)`` and calls ``scaler.update()`` itself; the harness
  unscales, steps and checkpoints it, and never updates it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Dict, List, Optional

import torch

_NULL = contextlib.nullcontext()  # reusable: nullcontext keeps no state

_SCALER_METHODS = ("scale", "step", "update", "state_dict")


def amp_dtype(device: torch.device) -> torch.dtype:
    """The reduced precision of AMP on ``device``: float16 on CUDA, bfloat16 on the CPU."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def amp_autocast(device: torch.device) -> ContextManager[Any]:
    """``torch.autocast`` on ``device`` in :func:`amp_dtype`."""
    return torch.autocast(device_type=device.type, dtype=amp_dtype(device))


def to_full_precision(output: Any) -> Any:
    """``output`` (nested in dicts, lists, tuples) with reduced-precision float tensors made
    float32, so that a loss computed outside autocast sees full precision."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {k: to_full_precision(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)) and not hasattr(output, "_fields"):
        return type(output)(to_full_precision(v) for v in output)
    return output


class Precision:
    """Mixed-precision state of one trial on one worker (full precision until enabled)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.autocasts = False  # experimental.use_amp() was called
        self.scalers: List[Any] = []  # registered with wrap_scaler()
        self.amp_scaler: Optional[Any] = None  # the harness's own scaler under use_amp (CUDA)
        self._amp_stepped = False  # amp_scaler stepped since its last update()

    # --- setup ------------------------------------------------------------------------------
    def enable_amp(self) -> None:
        """Autocast and, on CUDA, scale the loss with a harness-owned GradScaler."""
        if self.scalers:
            raise RuntimeError("experimental.use_amp() cannot be combined with wrap_scaler()")
        if self.autocasts:
            return
        self.autocasts = True
        if self.device.type == "cuda":
            self.amp_scaler = torch.amp.GradScaler("cuda")

    def add_scaler(self, scaler: Any) -> Any:
        """Register a trial-owned ``torch.amp.GradScaler``."""
        if not all(hasattr(scaler, a) for a in _SCALER_METHODS):
            raise TypeError(f"wrap_scaler() needs a torch.amp.GradScaler, got {type(scaler).__name__}")
        if self.autocasts:
            raise RuntimeError(
                "wrap_scaler() cannot be combined with experimental.use_amp(), which manages its own scaler"
            )
        self.scalers.append(scaler)
        return scaler

    def check_scaler(self, scaler: Optional[Any]) -> None:
        if scaler is not None and not any(s is scaler for s in self.scalers):
            raise ValueError("step_optimizer(scaler=...) needs a scaler returned by context.wrap_scaler()")

    # --- the step ---------------------------------------------------------------------------
    def autocast(self) -> ContextManager[Any]:
        """Autocast under ``use_amp`` (float16 on CUDA, bfloat16 on CPU); a no-op otherwise."""
        if not self.autocasts:
            return _NULL
        return amp_autocast(self.device)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to backpropagate: scaled by the harness's scaler under ``use_amp`` on CUDA."""
        return self.amp_scaler.scale(loss) if self.amp_scaler is not None else loss

    def _scaler_for(self, scaler: Optional[Any]) -> Optional[Any]:
        return scaler if scaler is not None else self.amp_scaler

    def unscale(self, optimizer: torch.optim.Optimizer, scaler: Optional[Any] = None) -> None:
        """Bring the optimizer's gradients back to their true scale before they are used."""
        scaler = self._scaler_for(scaler)
        if scaler is not None:
            scaler.unscale_(optimizer)

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        scaler: Optional[Any] = None,
        plain_step: Optional[Callable[[], Any]] = None,
    ) -> None:
        """Step ``optimizer`` through its scaler, which skips steps with inf/NaN gradients;
        without one, through ``plain_step`` (the loop's: ``optimizer.step`` without torch's
        profiler scope), else ``optimizer.step``."""
        scaler = self._scaler_for(scaler)
        if scaler is None:
            (plain_step or optimizer.step)()
            return
        scaler.step(optimizer)
        if scaler is self.amp_scaler:
            self._amp_stepped = True

    def update(self) -> None:
        """Once per optimizer-step batch, after every optimizer stepped: adjust the harness's own
        loss scale (``use_amp``). Scalers from ``wrap_scaler`` are the trial's to update."""
        if self._amp_stepped and self.amp_scaler is not None:
            self.amp_scaler.update()
        self._amp_stepped = False

    # --- state ------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {
            "scalers_state_dict": [s.state_dict() for s in self.scalers],
            "amp_scaler_state_dict": self.amp_scaler.state_dict() if self.amp_scaler else None,
        }

    def load_state_dict(self, state: Dict[str, Any], saved_scalers: List[Any]) -> None:
        """Restore from a context state dict (``saved_scalers``: its checked scaler entries)."""
        for scaler, sd in zip(self.scalers, saved_scalers):
            if sd is not None:  # None: the checkpoint had no state for it (one from Determined)
                scaler.load_state_dict(sd)
        if self.amp_scaler is not None and state.get("amp_scaler_state_dict"):
            self.amp_scaler.load_state_dict(state["amp_scaler_state_dict"])
