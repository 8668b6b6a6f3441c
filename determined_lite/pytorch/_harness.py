"""TrialHarness: what a trial's context and the training loop share (det-lite's, not Determined's).

The user-facing :class:`~determined_lite.pytorch.PyTorchTrialContext` fills it as the trial
wraps its models, optimizers, schedulers, scalers and reducers; the loop reads it, installs the
callbacks and writes the progress in ``state``. Everything here is a public field so that
neither side reaches into the other's private attributes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, List, Optional

import torch

from determined_lite.config import TrainingSettings
from determined_lite.distributed import DistributedContext
from determined_lite.pytorch._compile import strip_compile_prefix
from determined_lite.pytorch._hooks import HookDispatcher, NoCallbacks
from determined_lite.pytorch._lr_scheduler import LRScheduler, LRStepper
from determined_lite.pytorch._precision import Precision
from determined_lite.pytorch._reducer import WrappedReducer
from determined_lite.pytorch._schedule import TrainingState

logger = logging.getLogger("determined_lite")


@dataclasses.dataclass
class TrialInfo:
    """Identity of a trial inside an experiment (filled in by the experiment launcher)."""

    trial_id: Optional[int] = None
    experiment_id: Optional[int] = None
    trial_seed: Optional[int] = None
    context_dir: Optional[str] = None
    checkpoint_root: Optional[str] = None
    tensorboard_path: Optional[str] = None
    store_path: Optional[str] = None  # the experiment store that registers its checkpoints


class WrappedOptimizer:
    """Bookkeeping for one wrapped optimizer (the object the trial holds is ``optimizer``).

    It also notices two mistakes, each said once per trial: a step with no gradients (no
    ``backward`` before ``step_optimizer``), and ``optimizer.step()`` called by the trial itself
    (the harness's aggregation, AMP, clipping and step counting then miss it).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int) -> None:
        self.optimizer = optimizer
        self.backward_passes_per_step = backward_passes_per_step
        self.steps = 0
        self.stepping = False  # inside step_optimizer
        self._warned: set = set()
        optimizer.register_step_post_hook(self.after_step)

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.stepping:
            self.warn_once(
                "manual_step",
                f"{type(optimizer).__name__}.step() was called outside context.step_optimizer(); "
                "call context.step_optimizer(optimizer) instead, so that gradient aggregation, "
                "AMP, clipping and LR scheduling see the step",
            )

    def has_gradients(self) -> bool:
        return any(p.grad is not None for group in self.optimizer.param_groups for p in group["params"])

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    def parameters(self) -> List[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def owns(self, optimizer: Any) -> bool:
        """Whether ``optimizer`` is this one (or a view sharing its param groups, as a scheduler
        built on the unwrapped optimizer holds)."""
        return self.optimizer is optimizer or self.optimizer.param_groups is getattr(
            optimizer, "param_groups", None
        )


class TrialHarness:
    """The wrapped objects, precision, callbacks and progress of one trial on one worker."""

    def __init__(
        self,
        distributed: DistributedContext,
        device: torch.device,
        *,
        aggregation_frequency: int,
        average_aggregated_gradients: bool,
        trial_seed: int,
        settings: TrainingSettings,
    ) -> None:
        self.distributed = distributed
        self.settings = settings  # the experiment config's training fields
        self.trial_info = TrialInfo()  # where the trial belongs; set by init()
        self.state = TrainingState(aggregation_frequency=aggregation_frequency)
        self.average_aggregated_gradients = average_aggregated_gradients
        self.trial_seed = trial_seed  # restored from a checkpoint on resume
        self.precision = Precision(device)
        self.callbacks: HookDispatcher = NoCallbacks()  # the loop installs its CallbackList
        self.models: List[torch.nn.Module] = []
        self.optimizers: List[WrappedOptimizer] = []
        self.lr = LRStepper(self.optimizer_steps)
        self.reducers: List[WrappedReducer] = []
        self.auto_to_device = True
        self.dataset_checks = True
        self.stop_requested = False
        # context.set_profiler's torch.profiler.profile arguments; fit runs callbacks.Profiler with them
        self.profiler_kwargs: Optional[Dict[str, Any]] = None
        self.tensorboard_logging = True  # context.set_enable_tensorboard_logging: metrics to TensorBoard
        self.tensorboard_writer: Optional[Any] = None  # context.get_tensorboard_writer; closed by init()
        # What callbacks tell the user (ModelSummary, EarlyStopping): the run's own output while
        # Trainer.run runs (a plain-Python run's metric lines on stdout), else the log.
        self.say: Callable[[str], None] = logger.info

    def find_optimizer(self, optimizer: Any) -> Optional[WrappedOptimizer]:
        for wrapped in self.optimizers:
            if wrapped.owns(optimizer):
                return wrapped
        return None

    def optimizer_steps(self, optimizer: Any) -> Optional[int]:
        wrapped = self.find_optimizer(optimizer)
        return None if wrapped is None else wrapped.steps

    @property
    def lr_schedulers(self) -> List[LRScheduler]:
        return self.lr.schedulers

    def reducers_for(self, training: bool) -> List[WrappedReducer]:
        """The reducers that take part in training (or validation) metrics."""
        return [r for r in self.reducers if (r.for_training if training else r.for_validation)]

    def reset_reducers(self, training: bool) -> None:
        for r in self.reducers_for(training):
            r.reducer.reset()

    def wrapped_counts(self) -> Dict[str, int]:
        """How many models, optimizers, LR schedulers and scalers the trial wrapped (what a
        Determined checkpoint's state is matched against)."""
        return {
            "models": len(self.models),
            "optimizers": len(self.optimizers),
            "lr_schedulers": len(self.lr_schedulers),
            "scalers": len(self.precision.scalers),
        }

    # --- checkpoint state -------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Models, optimizers, schedulers and scalers (the ``context`` entry of a checkpoint)."""
        return {
            "models_state_dict": [unwrap(m).state_dict() for m in self.models],
            "optimizers_state_dict": [w.optimizer.state_dict() for w in self.optimizers],
            "optimizer_steps": [w.steps for w in self.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in self.lr_schedulers],
            **self.precision.state_dict(),
        }

    def load_state_dict(self, state: Dict[str, Any], strict: bool = True) -> None:
        """Restore :meth:`state_dict`; ``strict=False`` loads the models' weights only."""

        def check(key: str, have: int) -> List[Any]:
            saved = state.get(key, [])
            if strict and len(saved) != have:
                raise ValueError(
                    f"checkpoint has {len(saved)} entries in {key!r} but the trial wrapped {have}; "
                    "the trial's __init__ must wrap the same objects as when it was saved"
                )
            return saved

        for model, sd in zip(self.models, check("models_state_dict", len(self.models))):
            unwrap(model).load_state_dict(strip_compile_prefix(sd))
        if not strict:
            return
        for w, sd in zip(self.optimizers, check("optimizers_state_dict", len(self.optimizers))):
            w.optimizer.load_state_dict(sd)
        for w, steps in zip(self.optimizers, state.get("optimizer_steps", [])):
            w.steps = steps
        for s, sd in zip(self.lr_schedulers, check("lr_schedulers_state_dict", len(self.lr_schedulers))):
            s.load_state_dict(sd)
        scalers = check("scalers_state_dict", len(self.precision.scalers))
        self.precision.load_state_dict(state, scalers)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a distributed wrapper (DDP and friends expose ``.module``) or a
    hand-made ``torch.compile(model)`` (whose ``state_dict`` keys carry ``_orig_mod.``)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    orig = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule: the module it compiled
    if isinstance(orig, torch.nn.Module):
        return unwrap(orig)
    return model
