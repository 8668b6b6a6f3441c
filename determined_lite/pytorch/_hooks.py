"""The hooks: ONE enum that names them, in the order a run first fires them, and ``HOOK_TABLE``
(where each fires, when, and on which workers).

The bottom of ``pytorch/``: the loop, the context and the LR stepper fire hooks by ``Hook``
member through a :class:`HookDispatcher` (the loop installs a ``CallbackList``), so none of
them names a hook as a string or imports the callbacks above them.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, FrozenSet, Optional, Protocol, Tuple


class Hook(str, enum.Enum):
    """Every ``PyTorchCallback`` hook (the value is the method's name), in the order a run first
    fires them: a resumed run that validates and checkpoints (tests check this order)."""

    SETUP = "setup"
    ON_BEFORE_LOAD_CHECKPOINT = "on_before_load_checkpoint"
    ON_CHECKPOINT_LOAD_START = "on_checkpoint_load_start"
    ON_TRIAL_STARTUP = "on_trial_startup"
    ON_TRAINING_START = "on_training_start"
    ON_TRAINING_EPOCH_START = "on_training_epoch_start"
    ON_TRAIN_BATCH_START = "on_train_batch_start"
    ON_BEFORE_FORWARD = "on_before_forward"
    ON_AFTER_FORWARD = "on_after_forward"
    ON_BEFORE_BACKWARD = "on_before_backward"
    ON_AFTER_BACKWARD = "on_after_backward"
    ON_BEFORE_OPTIMIZER_STEP = "on_before_optimizer_step"
    ON_AFTER_OPTIMIZER_STEP = "on_after_optimizer_step"
    ON_BEFORE_OPTIMIZER_ZERO_GRAD = "on_before_optimizer_zero_grad"
    ON_AFTER_OPTIMIZER_ZERO_GRAD = "on_after_optimizer_zero_grad"
    ON_BEFORE_SCHEDULER_STEP = "on_before_scheduler_step"
    ON_AFTER_SCHEDULER_STEP = "on_after_scheduler_step"
    ON_TRAIN_BATCH_END = "on_train_batch_end"
    ON_TRAINING_EPOCH_END = "on_training_epoch_end"
    ON_TRAINING_WORKLOAD_END = "on_training_workload_end"
    ON_VALIDATION_START = "on_validation_start"
    ON_VALIDATION_STEP_START = "on_validation_step_start"
    ON_VALIDATION_EPOCH_START = "on_validation_epoch_start"
    ON_VALIDATION_BATCH_START = "on_validation_batch_start"
    ON_VALIDATION_BATCH_END = "on_validation_batch_end"
    ON_VALIDATION_EPOCH_END = "on_validation_epoch_end"
    ON_VALIDATION_END = "on_validation_end"
    ON_VALIDATION_STEP_END = "on_validation_step_end"
    ON_CHECKPOINT_SAVE_START = "on_checkpoint_save_start"
    ON_CHECKPOINT_WRITE_END = "on_checkpoint_write_end"
    ON_CHECKPOINT_END = "on_checkpoint_end"
    ON_CHECKPOINT_UPLOAD_END = "on_checkpoint_upload_end"
    ON_TRAINING_END = "on_training_end"
    ON_TRIAL_SHUTDOWN = "on_trial_shutdown"


@dataclasses.dataclass(frozen=True)
class HookSpec:
    """One hook: the code that fires it (``where``), when, and whether only the chief runs it."""

    hook: Hook
    where: str
    when: str
    chief_only: bool = False
    alias_of: Optional[Hook] = None  # a deprecated name, fired right after the hook it aliases
    legacy_no_args: bool = False  # an override taking no arguments is called without them (deprecated)

    @property
    def name(self) -> str:
        return self.hook.value


# Where: the code that fires the hook (module[.Class.method] under determined_lite/pytorch/).
_SETUP = "_controller.TrialController.run"
_RUN = "_controller.TrialController._run"
_TRAIN = "_controller.TrialController._train"
_BATCH = "_controller.TrialController._train_batch"
_RESTORE = "_restore.Restorer"
_REPORT = "_controller.TrialController._flush_training"
_VALIDATE = "_controller.TrialController._validate"
_SAVE = "_checkpointing.CheckpointWriter.save"
_ON_DISK = "_checkpointing.CheckpointWriter.on_disk"
_BACKWARD = "_context.PyTorchTrialContext.backward"
_STEP = "_optimizer_step"
_LR = "_lr_scheduler.LRStepper"
_FORWARD = "_forward_hooks"
_EVAL = "_validation.Validation._evaluate_batches"

# Hooks that are not chief_only run on every worker, the same number of times on each, except
# those of validation batches and forwards in validation: they follow each worker's share of
# the validation data (evaluate_full_dataset runs on the chief only).
_S = HookSpec
HOOK_TABLE: Tuple[HookSpec, ...] = (
    _S(Hook.SETUP, _SETUP, "once, first; before the data loaders are built and a checkpoint is read"),
    _S(Hook.ON_BEFORE_LOAD_CHECKPOINT, _RESTORE, "resuming: before the checkpoint directory is read"),
    _S(Hook.ON_CHECKPOINT_LOAD_START, _RESTORE, "resuming: checkpoint read, trial state not restored"),
    _S(Hook.ON_TRIAL_STARTUP, _RUN, "once, after restoring and broadcasting the initial state"),
    _S(Hook.ON_TRAINING_START, _TRAIN, "once, before the first batch of this run"),
    _S(Hook.ON_TRAINING_EPOCH_START, _BATCH, "before each epoch's first batch", legacy_no_args=True),
    _S(Hook.ON_TRAIN_BATCH_START, _BATCH, "each batch, before train_batch (batch on the device)"),
    _S(Hook.ON_BEFORE_FORWARD, _FORWARD, "each forward of a wrapped model, training and validation"),
    _S(Hook.ON_AFTER_FORWARD, _FORWARD, "each forward of a wrapped model, training and validation"),
    _S(Hook.ON_BEFORE_BACKWARD, _BACKWARD, "each context.backward, before gradients; may replace the loss"),
    _S(Hook.ON_AFTER_BACKWARD, _BACKWARD, "each context.backward, after gradients"),
    _S(Hook.ON_BEFORE_OPTIMIZER_STEP, _STEP, "optimizer-step batches: gradients averaged and clipped"),
    _S(Hook.ON_AFTER_OPTIMIZER_STEP, _STEP, "optimizer-step batches: after optimizer.step()"),
    _S(Hook.ON_BEFORE_OPTIMIZER_ZERO_GRAD, _STEP, "after each step, unless auto_zero_grads=False"),
    _S(Hook.ON_AFTER_OPTIMIZER_ZERO_GRAD, _STEP, "after each step, unless auto_zero_grads=False"),
    _S(Hook.ON_BEFORE_SCHEDULER_STEP, _LR, "before each automatic step of a wrapped LR scheduler"),
    _S(Hook.ON_AFTER_SCHEDULER_STEP, _LR, "after each automatic step of a wrapped LR scheduler"),
    _S(Hook.ON_TRAIN_BATCH_END, _BATCH, "each batch, after train_batch and its LR steps"),
    _S(Hook.ON_TRAINING_EPOCH_END, _BATCH, "after the last batch of each epoch"),
    _S(Hook.ON_TRAINING_WORKLOAD_END, _REPORT, "each report"),
    _S(Hook.ON_VALIDATION_START, _VALIDATE, "each validation, first"),
    _S(Hook.ON_VALIDATION_STEP_START, _VALIDATE, "each validation", alias_of=Hook.ON_VALIDATION_START),
    _S(Hook.ON_VALIDATION_EPOCH_START, _EVAL, "each evaluate_batch validation, before its first batch"),
    _S(Hook.ON_VALIDATION_BATCH_START, _EVAL, "each validation batch, before evaluate_batch"),
    _S(Hook.ON_VALIDATION_BATCH_END, _EVAL, "each validation batch, after evaluate_batch"),
    _S(Hook.ON_VALIDATION_EPOCH_END, _EVAL, "each evaluate_batch validation, last", legacy_no_args=True),
    _S(Hook.ON_VALIDATION_END, _VALIDATE, "each validation, last: the reduced metrics"),
    _S(Hook.ON_VALIDATION_STEP_END, _VALIDATE, "each validation", alias_of=Hook.ON_VALIDATION_END),
    _S(Hook.ON_CHECKPOINT_SAVE_START, _SAVE, "each checkpoint, before it is written", chief_only=True),
    _S(Hook.ON_CHECKPOINT_WRITE_END, _SAVE, "each checkpoint, complete under its name", chief_only=True),
    _S(Hook.ON_CHECKPOINT_END, _SAVE, "each checkpoint", True, alias_of=Hook.ON_CHECKPOINT_WRITE_END),
    _S(Hook.ON_CHECKPOINT_UPLOAD_END, _ON_DISK, "on disk: at the next report, checkpoint or end", True),
    _S(Hook.ON_TRAINING_END, _RUN, "once, training ended without an exception; final checkpoint on disk"),
    _S(Hook.ON_TRIAL_SHUTDOWN, _RUN, "once, last; also after an error (once on_trial_startup ran)"),
)
HOOK_SPECS: Dict[Hook, HookSpec] = {spec.hook: spec for spec in HOOK_TABLE}
HOOKS: Tuple[str, ...] = tuple(hook.value for hook in Hook)
CHIEF_ONLY_HOOKS: FrozenSet[str] = frozenset(spec.name for spec in HOOK_TABLE if spec.chief_only)


class HookDispatcher(Protocol):
    """What fires hooks needs of the installed callbacks (``CallbackList`` implements it)."""

    def has(self, hook: Hook) -> bool:
        """Whether any callback overrides ``hook`` (so the caller can skip costly arguments)."""

    def call(self, hook: Hook, *args: Any) -> None:
        """Run ``hook(*args)`` on every callback that overrides it."""

    def call_chain(self, hook: Hook, value: Any, *args: Any) -> Any:
        """Run ``hook(value, *args)``; a callback's non-None result replaces ``value``."""


class NoCallbacks:
    """The dispatcher of a harness before the loop installs its callbacks: fires nothing."""

    def has(self, hook: Hook) -> bool:
        return False

    def call(self, hook: Hook, *args: Any) -> None:
        return None

    def call_chain(self, hook: Hook, value: Any, *args: Any) -> Any:
        return value
