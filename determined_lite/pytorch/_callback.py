"""PyTorchCallback, global callback registration, and CallbackList: the one place hooks are
dispatched from (which hooks there are, in which order: ``_hooks.HOOK_TABLE``)."""

from __future__ import annotations

import inspect
import logging
import threading
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._hooks import HOOK_TABLE, Hook

logger = logging.getLogger("determined_lite")


class PyTorchCallback:
    """Base class of callbacks run during a trial's life; override the hooks you need.

    Each hook runs on every callback in this order: the harness's own (core) callbacks, then the
    trial's ``build_callbacks()`` in insertion order, then those given to ``Trainer(...,
    callbacks=)`` and ``fit(callbacks=)``, then global callbacks in registration order. Where
    and when each hook fires, and whether only the chief runs it: ``HOOK_TABLE``.
    Stateful callbacks override ``state_dict``/``load_state_dict``; their state is saved in
    every checkpoint under the callback's name and restored on resume.

    A callback is also a context manager: ``with cb:`` registers it globally for the block.
    """

    # --- trial life -------------------------------------------------------------------------
    def setup(self, context: "PyTorchTrialContext") -> None:
        """Once, before anything else: the trial is built, its loaders and checkpoint are not.

        ``context`` is the trial's context (models, optimizers, distributed, TensorBoard path,
        ``set_stop_requested``); ready-made callbacks keep it for their other hooks.
        """

    def on_before_load_checkpoint(self, ckpt_path: str) -> None:
        """Before the checkpoint directory ``ckpt_path`` is read (resuming); every worker."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        """Before training begins; ``checkpoint_uuid`` is the checkpoint resumed from, if any."""

    def on_trial_shutdown(self) -> None:
        """After the trial finished or failed (always called once startup ran)."""

    def on_training_end(self) -> None:
        """Once training ended without an exception (``max_length`` reached or a stop was
        honoured), after its final checkpoint is on disk; not called when training raised."""

    # --- training ---------------------------------------------------------------------------
    def on_training_start(self) -> None:
        """Before the first training batch of this run."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of every training epoch (the legacy form without ``epoch_idx``
        still runs, with a deprecation warning, as in Determined)."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of every training epoch."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before ``train_batch`` (the batch is already on the device)."""

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        """After ``train_batch``, with the metrics it returned (unreduced)."""

    def on_before_forward(self, model: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        """Before a model passed to ``wrap_model`` runs forward (training and validation; the
        model is in eval mode in validation), with its positional and keyword arguments."""

    def on_after_forward(self, model: Any, output: Any) -> None:
        """After a model passed to ``wrap_model`` ran forward, with what it returned."""

    def on_before_backward(self, loss: Any) -> Optional[Any]:
        """Before ``context.backward(loss)`` computes gradients.

        May return a tensor to backpropagate instead of ``loss`` (e.g. a scaled loss); the
        next callback receives it. The trial's returned metrics keep the original loss.
        """
        return None

    def on_after_backward(self, loss: Any) -> None:
        """After ``context.backward(loss)`` computed gradients (``loss`` as the trial passed it)."""

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
        """After the last validation batch, with this worker's ``evaluate_batch`` outputs (the
        form without ``outputs`` still runs, with a deprecation warning)."""

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


class CallbackDeprecationWarning(FutureWarning, DeprecationWarning):
    """A callback uses a deprecated hook or hook signature. Determined warns with a
    ``FutureWarning`` (``on_checkpoint_end``) or a log line; this is both warnings, and det-lite
    logs it too."""


def _takes_no_arguments(method: Any) -> bool:
    """Whether a bound hook declares no parameter at all (Determined's test for a legacy form)."""
    try:
        return not inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): call it normally
        return False


def _deprecated(message: str) -> None:
    warnings.warn(message, CallbackDeprecationWarning, stacklevel=3)
    logger.warning(message)  # DeprecationWarning is hidden outside __main__


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


Callbacks = Union[Sequence[PyTorchCallback], Mapping[str, PyTorchCallback]]


def name_callbacks(callbacks: Callbacks, prefix: str) -> List[Tuple[str, PyTorchCallback]]:
    """Name callbacks for dispatch and checkpoint state: a mapping keeps its names (prefixed), a
    sequence is named by class, ``#2``, ``#3`` ... for repeats (stable for the same list)."""
    if isinstance(callbacks, Mapping):
        return [(f"{prefix}{name}", cb) for name, cb in callbacks.items()]
    if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Sequence):
        raise TypeError(
            f"callbacks must be a list or a dict of names to PyTorchCallbacks, got {type(callbacks).__name__}"
        )
    seen: Dict[str, int] = {}
    named = []
    for cb in callbacks:
        base = f"{prefix}{type(cb).__qualname__}"
        seen[base] = seen.get(base, 0) + 1
        named.append((base if seen[base] == 1 else f"{base}#{seen[base]}", cb))
    return named


# --- dispatch -------------------------------------------------------------------------------


class CallbackError(RuntimeError):
    """A callback's hook raised; the message names the callback and the hook."""


class CallbackList:
    """Named callbacks in dispatch order; ``call(hook, ...)`` runs one hook on all of them.

    For each hook the list of callbacks that override it is computed once, so a hook that
    nobody overrides costs one dict lookup per call. Deprecated hooks and legacy signatures (an
    override of a ``legacy_no_args`` hook that takes no arguments, called without them) are
    found here, once, each with one :class:`CallbackDeprecationWarning`.
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
        # per hook: (name, callback, its method's name, called without arguments: the legacy form)
        self._by_hook: Dict[Hook, List[Tuple[str, PyTorchCallback, str, bool]]] = {}
        for spec in HOOK_TABLE:
            hook = spec.hook
            base = getattr(PyTorchCallback, hook.value)
            users = [(n, cb) for n, cb in self._named if getattr(type(cb), hook.value, base) is not base]
            if spec.chief_only and not is_chief:
                users = []
            legacy = spec.legacy_no_args
            self._by_hook[hook] = [
                (n, cb, hook.value, legacy and self._legacy(n, cb, hook)) for n, cb in users
            ]
            if spec.alias_of is not None:
                use = spec.alias_of.value
                for n, _ in users:
                    _deprecated(f"callback {n!r} overrides {hook.value}, which is deprecated; use {use}")

    @staticmethod
    def _legacy(name: str, cb: PyTorchCallback, hook: Hook) -> bool:
        method = hook.value
        if not _takes_no_arguments(getattr(cb, method)):
            return False
        params = ", ".join(inspect.signature(getattr(PyTorchCallback, method)).parameters)
        _deprecated(
            f"callback {name!r} defines {method}() without parameters, which is deprecated; "
            f"define {method}({params})"
        )
        return True

    def __iter__(self) -> Iterator[Tuple[str, PyTorchCallback]]:
        return iter(self._named)

    def has(self, hook: Hook) -> bool:
        return bool(self._by_hook[hook])

    def call(self, hook: Hook, *args: Any) -> None:
        for name, cb, method, legacy in self._by_hook[hook]:
            try:
                getattr(cb, method)(*(() if legacy else args))
            except Exception as e:
                raise _raised(name, cb, method, e) from e

    def call_chain(self, hook: Hook, value: Any, *args: Any) -> Any:
        """Run ``hook(value, *args)`` on each callback; one that returns something other than
        None replaces ``value`` for the next callbacks and the caller (``on_before_backward``)."""
        for name, cb, method, _ in self._by_hook[hook]:
            try:
                result = getattr(cb, method)(value, *args)
            except Exception as e:
                raise _raised(name, cb, method, e) from e
            if result is not None:
                if not isinstance(result, type(value)):
                    raise CallbackError(
                        f"callback {name!r} ({type(cb).__qualname__}) returned a "
                        f"{type(result).__name__} from {hook.value}; return a {type(value).__name__} "
                        "to replace it, or None"
                    )
                value = result
        return value

    def state_dict(self) -> Dict[str, Any]:
        return {name: cb.state_dict() for name, cb in self._named}

    def load_state_dict(self, states: Dict[str, Any]) -> None:
        for name, cb in self._named:
            if name in states:
                try:
                    cb.load_state_dict(states[name])
                except Exception as e:
                    raise _raised(name, cb, "load_state_dict", e) from e


def _raised(name: str, cb: PyTorchCallback, where: str, error: Exception) -> CallbackError:
    """The error that names the callback and the hook (or method) that raised ``error``."""
    return CallbackError(
        f"callback {name!r} ({type(cb).__qualname__}) raised in {where}: {type(error).__name__}: {error}"
    )
