"""``on_before_forward`` / ``on_after_forward``: torch forward hooks on the wrapped models.

Installed for the length of one ``fit`` and only when some callback overrides one of the two
hooks, so a run without such a callback pays nothing per forward. The hooks sit on the objects
``wrap_model`` returned (what the trial calls), so each call of a wrapped model fires them once:
in training and in validation (the model is then in eval mode), not for its submodules.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch

from determined_lite.pytorch._hooks import Hook, HookDispatcher

BEFORE, AFTER = Hook.ON_BEFORE_FORWARD, Hook.ON_AFTER_FORWARD


class ForwardHooks:
    """The forward hooks of one run; ``remove()`` takes them off the models again."""

    def __init__(self, models: Sequence[torch.nn.Module], callbacks: HookDispatcher) -> None:
        self._handles: List[Any] = []
        for model in models:
            if callbacks.has(BEFORE):
                self._handles.append(
                    model.register_forward_pre_hook(_before(model, callbacks), with_kwargs=True)
                )
            if callbacks.has(AFTER):
                self._handles.append(model.register_forward_hook(_after(model, callbacks), with_kwargs=True))

    @property
    def installed(self) -> int:
        """How many torch hooks this run added (0 when no callback wants forwards)."""
        return len(self._handles)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _before(model: torch.nn.Module, callbacks: HookDispatcher) -> Any:
    def hook(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        callbacks.call(BEFORE, model, args, kwargs)

    return hook


def _after(model: torch.nn.Module, callbacks: HookDispatcher) -> Any:
    def hook(module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        callbacks.call(AFTER, model, output)

    return hook
