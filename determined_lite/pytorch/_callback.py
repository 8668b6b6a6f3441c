"""PyTorchCallback, global callback registration, and the one place hooks are dispatched from."""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

logger = logging.getLogger("determined_lite")


class PyTorchCallback:
    """Base class of callbacks run during a trial's life; override the hooks you need.

    Hooks run in this order on every callback: the harness's own callbacks, then the trial's
    ``build_callbacks()`` in insertion order, then global callbacks in registration order.
    Stateful callbacks override ``state_dict``/``load_state_dict``; their state is saved in
    every checkpoint under the callback's name and restored on resume.

    A callback is also a context manager: ``with cb:`` registers it globally for the block.
    """

    # --- trial life -------------------------------------------------------------------------
    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        """Before training begins; ``checkpoint_uuid`` is the checkpoint resumed from, if any."""

    def on_trial_shutdown(self) -> None:
        """After the trial finished or failed (always called once startup ran)."""

    # --- training ---------------------------------------------------------------------------
    def on_training_start(self) -> None:
        """Before the first training batch of this run."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of every training epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of every training epoch."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before ``train_batch`` (the batch is already on the device)."""

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        """After ``train_batch``, with the metrics it returned (unreduced)."""

    def on_before_backward(self, loss: Any) -> None:
        """Before ``context.backward(loss)`` computes gradients."""

    def on_after_backward(self, loss: Any) -> None:
        """After ``context.backward(loss)`` computed gradients."""

    def on_before_optimizer_step(self, parameters: Iterator) -> None:
        """Before ``optimizer.step()``, after gradients were communicated and averaged.

        Deprecated in Determined for clipping: prefer ``step_optimizer(clip_grads=...)``.
        """

    def on_after_optimizer_step(self, optimizer: Any) -> None:
        """After ``optimizer.step()``."""

    def on_before_optimizer_zero_grad(self, optimizer: Any) -> None:
        """Before the harness zeroes the gradients after a step."""

    def on_after_optimizer_zero_grad(self, optimizer: Any) -> None:
        """After the harness zeroed the gradients after a step."""

    def on_before_scheduler_step(self, scheduler: Any) -> None:
        """Before the harness steps a wrapped LR scheduler."""

    def on_after_scheduler_step(self, scheduler: Any) -> None:
        """After the harness stepped a wrapped LR scheduler."""

    def on_training_workload_end(
        self, avg_metrics: Dict[str, Any], batch_metrics: List[Dict[str, Any]]
    ) -> None:
        """After every reported chunk of training, with metrics reduced across batches and workers."""

    # --- validation -------------------------------------------------------------------------
    def on_validation_start(self) -> None:
        """Before every validation."""

    def on_validation_step_start(self) -> None:
        """Deprecated alias of ``on_validation_start``."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before ``evaluate_batch``."""

    def on_validation_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        """After ``evaluate_batch``, with the metrics it returned (unreduced)."""

    def on_validation_epoch_end(self, outputs: List[Any]) -> None:
        """After the last validation batch, with this worker's ``evaluate_batch`` outputs."""

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        """After every validation, with the reduced metrics (on every worker)."""

    def on_validation_step_end(self, metrics: Dict[str, Any]) -> None:
        """Deprecated alias of ``on_validation_end``."""

    # --- checkpoints ------------------------------------------------------------------------
    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before trial state is restored from ``checkpoint`` (the loaded state dict)."""

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before ``checkpoint`` (the state dict about to be written) is saved; may add keys.

        Runs on the chief only.
        """

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint directory is complete under its final name. Chief only."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is flushed to disk (in the background, while training goes on).

        Comes at the first training report after the checkpoint, the next checkpoint, or the
        end of the trial, whichever is first; experiments register the checkpoint here. Chief only.
        """

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated alias of ``on_checkpoint_write_end``. Runs on the chief only."""

    # --- state ------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Picklable state saved in every checkpoint."""
        return {}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    # --- global registration ----------------------------------------------------------------
    def __enter__(self) -> "PyTorchCallback":
        self.__handle = register_global_callback(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.__handle.remove()


CHIEF_ONLY_HOOKS = frozenset(
    {
        "on_checkpoint_save_start",
        "on_checkpoint_write_end",
        "on_checkpoint_upload_end",
        "on_checkpoint_end",
    }
)
_DEPRECATED_HOOKS = {
    "on_checkpoint_end": "on_checkpoint_write_end",
    "on_validation_step_start": "on_validation_start",
    "on_validation_step_end": "on_validation_end",
}
HOOKS = tuple(
    name for name, value in vars(PyTorchCallback).items() if name.startswith("on_") and callable(value)
)


# --- global callbacks -----------------------------------------------------------------------

_global_lock = threading.Lock()
_global_callbacks: List[Tuple[int, PyTorchCallback]] = []
_next_handle_id = 0


class RemovableHandle:
    """Returned by ``register_global_callback``; ``remove()`` unregisters the callback."""

    def __init__(self, handle_id: int) -> None:
        self._id = handle_id

    def remove(self) -> None:
        with _global_lock:
            _global_callbacks[:] = [(i, cb) for i, cb in _global_callbacks if i != self._id]

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def register_global_callback(callback: PyTorchCallback) -> RemovableHandle:
    """Run ``callback`` in every trial started from now on, after its own callbacks."""
    global _next_handle_id
    if not isinstance(callback, PyTorchCallback):
        raise TypeError(
            "register_global_callback() needs a determined_lite.pytorch.PyTorchCallback, got "
            f"{type(callback).__name__}"
        )
    with _global_lock:
        _next_handle_id += 1
        _global_callbacks.append((_next_handle_id, callback))
        return RemovableHandle(_next_handle_id)


def global_callbacks() -> List[PyTorchCallback]:
    """The globally registered callbacks, in registration order."""
    with _global_lock:
        return [cb for _, cb in _global_callbacks]


# --- dispatch -------------------------------------------------------------------------------


class CallbackError(RuntimeError):
    """A callback's hook raised; the message names the callback and the hook."""


class CallbackList:
    """Named callbacks in dispatch order; ``call(hook, ...)`` runs one hook on all of them.

    For each hook the list of callbacks that override it is computed once, so a hook that
    nobody overrides costs one dict lookup per call.
    """

    def __init__(self, named: Sequence[Tuple[str, PyTorchCallback]], is_chief: bool) -> None:
        names = [name for name, _ in named]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"two callbacks share the name(s) {sorted(duplicates)}")
        for name, cb in named:
            if not isinstance(cb, PyTorchCallback):
                raise TypeError(
                    f"callback {name!r} must be a determined_lite.pytorch.PyTorchCallback, got "
                    f"{type(cb).__name__}"
                )
        self._named = list(named)
        self._by_hook: Dict[str, List[Tuple[str, PyTorchCallback]]] = {}
        for hook in HOOKS:
            base = getattr(PyTorchCallback, hook)
            users = [(name, cb) for name, cb in self._named if getattr(type(cb), hook, base) is not base]
            if hook in CHIEF_ONLY_HOOKS and not is_chief:
                users = []
            self._by_hook[hook] = users
            if hook in _DEPRECATED_HOOKS:
                for name, _ in users:
                    message = (
                        f"callback {name!r} overrides {hook}, which is deprecated; use "
                        f"{_DEPRECATED_HOOKS[hook]}"
                    )
                    warnings.warn(message, DeprecationWarning, stacklevel=2)
                    logger.warning(message)  # DeprecationWarning is hidden outside __main__

    def __iter__(self) -> Iterator[Tuple[str, PyTorchCallback]]:
        return iter(self._named)

    def has(self, hook: str) -> bool:
        return bool(self._by_hook[hook])

    def call(self, hook: str, *args: Any) -> None:
        for name, cb in self._by_hook[hook]:
            try:
                getattr(cb, hook)(*args)
            except Exception as e:
                raise CallbackError(
                    f"callback {name!r} ({type(cb).__qualname__}) raised in {hook}: {type(e).__name__}: {e}"
                ) from e

    def state_dict(self) -> Dict[str, Any]:
        return {name: cb.state_dict() for name, cb in self._named}

    def load_state_dict(self, states: Dict[str, Any]) -> None:
        for name, cb in self._named:
            if name in states:
                try:
                    cb.load_state_dict(states[name])
                except Exception as e:
                    raise CallbackError(
                        f"callback {name!r} ({type(cb).__qualname__}) raised in load_state_dict: "
                        f"{type(e).__name__}: {e}"
                    ) from e
