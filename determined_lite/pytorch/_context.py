"""PyTorchTrialContext: what a trial uses to wrap its objects and drive backward/step."""

from __future__ import annotations

import copy
import difflib
import logging
import pathlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

import torch

from determined_lite._errors import ReducerUseError, UndefinedHParamError
from determined_lite.config import TrainingSettings
from determined_lite.distributed import DistributedContext, SingleProcessContext
from determined_lite.pytorch._compile import compile_wrapped_model
from determined_lite.pytorch._device import TorchData, default_device, move_to_device
from determined_lite.pytorch._harness import TrialHarness, WrappedOptimizer
from determined_lite.pytorch._hooks import Hook
from determined_lite.pytorch._lr_scheduler import LRScheduler
from determined_lite.pytorch._optimizer_step import step_optimizer
from determined_lite.pytorch._precision import amp_autocast, to_full_precision
from determined_lite.pytorch._reducer import MetricReducer, wrap_reducer

logger = logging.getLogger("determined_lite")

def _require_positive_int(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


class PyTorchExperimentalContext:
    """Experimental features of Determined's context, same names and meaning."""

    def __init__(self, parent: "PyTorchTrialContext") -> None:
        self._parent = parent
        self.wrap_reducer = parent.wrap_reducer  # Determined's older place for it, same method

    def use_amp(self) -> None:
        """Automatic mixed precision with no further code: autocast around ``train_batch`` and
        ``evaluate_batch``, a loss scaler in ``backward``/``step_optimizer`` (CUDA: float16 with a
        ``torch.amp.GradScaler``; CPU: bfloat16, which needs no scaling)."""
        self._parent.harness.precision.enable_amp()

    def disable_auto_to_device(self) -> None:
        """Leave batches where the data loader put them; the trial moves them itself."""
        self._parent.harness.auto_to_device = False

    def disable_dataset_reproducibility_checks(self) -> None:
        """Accept any iterable (e.g. a plain ``torch.utils.data.DataLoader``) as a data loader.

        The harness then cannot shard it across workers, nor skip exactly to a batch on resume
        beyond iterating past the batches already trained.
        """
        self._parent.harness.dataset_checks = False



class PyTorchTrialContext:
    """Runtime information and the wrapping/stepping API of one trial on one worker."""

    def __init__(
        self,
        *,
        hparams: Optional[Dict[str, Any]] = None,
        exp_conf: Optional[Dict[str, Any]] = None,
        distributed: Optional[DistributedContext] = None,
        aggregation_frequency: int = 1,
        average_aggregated_gradients: bool = True,
        trial_seed: int = 0,
        trial_id: Optional[int] = None,
        experiment_id: Optional[int] = None,
        device: Optional[torch.device] = None,
        tensorboard_path: Optional[str] = None,
    ) -> None:
        _require_positive_int("optimizations.aggregation_frequency", aggregation_frequency)
        self._hparams = dict(hparams or {})
        self._exp_conf = copy.deepcopy(exp_conf or {})
        self._distributed = distributed or SingleProcessContext()
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self.device = device or default_device(self._distributed)
        self._to_device_warned: set = set()  # types to_device warned about (once each)
        self._tensorboard_path = tensorboard_path
        self.experimental = PyTorchExperimentalContext(self)
        # det-lite: what the training loop shares with this context (not Determined's API).
        self.harness = TrialHarness(
            self._distributed,
            self.device,
            aggregation_frequency=aggregation_frequency,
            average_aggregated_gradients=average_aggregated_gradients,
            trial_seed=trial_seed,
            settings=TrainingSettings.from_config(self._exp_conf),
        )

    # --- information ------------------------------------------------------------------------
    @property
    def distributed(self) -> DistributedContext:
        """Rank, size, local/cross ranks and object collectives of this worker."""
        return self._distributed

    @property
    def models(self) -> List[torch.nn.Module]:
        """The wrapped models, in wrapping order."""
        return self.harness.models

    @property
    def optimizers(self) -> List[torch.optim.Optimizer]:
        """The wrapped optimizers, in wrapping order."""
        return [w.optimizer for w in self.harness.optimizers]

    @property
    def lr_schedulers(self) -> List[LRScheduler]:
        """The wrapped LR schedulers, in wrapping order."""
        return self.harness.lr_schedulers

    def get_hparams(self) -> Dict[str, Any]:
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        if name not in self._hparams:
            close = difflib.get_close_matches(name, [str(k) for k in self._hparams], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UndefinedHParamError(
                f"hyperparameter {name!r} is not defined; {hint}defined hyperparameters: "
                f"{sorted(self._hparams) or 'none'}"
            )
        return self._hparams[name]

    def get_experiment_config(self) -> Dict[str, Any]:
        return copy.deepcopy(self._exp_conf)

    def get_data_config(self) -> Dict[str, Any]:
        return copy.deepcopy(self._exp_conf.get("data") or {})

    def get_trial_seed(self) -> int:
        return self.harness.trial_seed

    def get_trial_id(self) -> Optional[int]:
        return self._trial_id

    def get_experiment_id(self) -> Optional[int]:
        return self._experiment_id

    def get_global_batch_size(self) -> int:
        if "global_batch_size" not in self._hparams:
            raise ValueError(
                "get_global_batch_size() needs the hyperparameter 'global_batch_size'; "
                f"defined hyperparameters: {sorted(self._hparams) or 'none'}"
            )
        value = self._hparams["global_batch_size"]
        _require_positive_int("hyperparameter 'global_batch_size'", value)
        return value

    def get_per_slot_batch_size(self) -> int:
        global_bs, size = self.get_global_batch_size(), self._distributed.size
        if global_bs % size:
            raise ValueError(
                f"hyperparameter 'global_batch_size' ({global_bs}) must be divisible by the "
                f"number of slots ({size})"
            )
        return global_bs // size

    def get_tensorboard_path(self) -> Optional[pathlib.Path]:
        """The trial's TensorBoard directory, a ``pathlib.Path`` as in Determined (None when
        ``init(..., enable_tensorboard_logging=False)``)."""
        return None if self._tensorboard_path is None else pathlib.Path(self._tensorboard_path)

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` on the trial's TensorBoard directory (one
        per trial, made on first use; closed when the trial's ``init`` block ends)."""
        if self.harness.tensorboard_writer is None:
            path = self.get_tensorboard_path()
            if path is None:
                raise RuntimeError(
                    "get_tensorboard_writer(): this trial has no TensorBoard directory "
                    "(init(..., enable_tensorboard_logging=False))"
                )
            from torch.utils.tensorboard import SummaryWriter

            self.harness.tensorboard_writer = SummaryWriter(log_dir=str(path))
        return self.harness.tensorboard_writer

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Whether det-lite writes the reported metrics to TensorBoard (Determined's switch for
        its automatic TensorBoard logging); read when training starts."""
        if not isinstance(enable_tensorboard_logging, bool):
            raise AssertionError("enable_tensorboard_logging must be a boolean")  # as Determined
        self.harness.tensorboard_logging = enable_tensorboard_logging

    def get_enable_tensorboard_logging(self) -> bool:
        return self.harness.tensorboard_logging

    def get_stop_requested(self) -> bool:
        return self.harness.stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the harness to checkpoint and end training at the next optimizer-step boundary."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"set_stop_requested() takes a bool, got {stop_requested!r}")
        self.harness.stop_requested = stop_requested

    # --- epochs and batches -----------------------------------------------------------------
    def current_train_batch(self) -> int:
        """Index of the training batch being trained, from 0 (counting batches trained before a
        resume). Before the first training batch it raises ``determined.errors.InternalException``
        ("Training hasn't started"), as Determined's does; so do the epoch methods below."""
        return self.harness.state.current_batch()

    def current_train_epoch(self) -> int:
        return self.harness.state.epoch

    def is_epoch_start(self) -> bool:
        state = self.harness.state
        return state.current_batch() % state.require_epoch_length() == 0

    def is_epoch_end(self) -> bool:
        state = self.harness.state
        return (state.current_batch() + 1) % state.require_epoch_length() == 0

    def get_initial_batch(self) -> int:
        """Batches trained before this run: those of the checkpoint it resumes from, else 0.
        Known from ``Trainer.fit`` on (its data loaders, callbacks and batches), as Determined's
        from the trial's start."""
        return self.harness.state.initial_batch

    # --- wrapping ---------------------------------------------------------------------------
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to this worker's device and make it distributed-aware.

        With ``optimizations.compile`` (or ``init(compile=...)``) its ``forward`` is compiled in
        place (``determined_lite/pytorch/_compile.py``): the trial keeps the same module.
        """
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"wrap_model() needs a torch.nn.Module, got {type(model).__name__}")
        if any(m is model for m in self.models):
            raise ValueError(f"wrap_model() was already called on this {type(model).__name__}")
        model = model.to(self.device)
        if self.harness.settings.compile.enabled:
            compile_wrapped_model(model, len(self.models), self.harness.settings.compile, self.device)
        wrapped = self._distributed.wrap_model(model, self.device)
        self.harness.models.append(wrapped)
        return wrapped

    def autocast_forward_pass(self, to_wrap: torch.nn.Module) -> torch.nn.Module:
        """Run ``to_wrap``'s forward pass under autocast (float16 on CUDA, bfloat16 on the CPU)
        and give its floating outputs back in float32, so the loss needs no autocast (Determined's
        ``context.autocast_forward_pass``; the module itself is returned, its forward wrapped)."""
        if not isinstance(to_wrap, torch.nn.Module):
            raise TypeError(f"autocast_forward_pass() needs a torch.nn.Module, got {type(to_wrap).__name__}")
        forward, device = to_wrap.forward, self.device

        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with amp_autocast(device):
                return forward(*args, **kwargs)

        to_wrap.forward = autocast_forward
        to_wrap.register_forward_hook(lambda module, inputs, output: to_full_precision(output))
        return to_wrap

    def wrap_optimizer(
        self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int = 1
    ) -> torch.optim.Optimizer:
        """Register ``optimizer`` (built on wrapped models' parameters) with the harness."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"wrap_optimizer() needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
        _require_positive_int("wrap_optimizer(backward_passes_per_step=...)", backward_passes_per_step)
        if any(w.optimizer is optimizer for w in self.harness.optimizers):
            raise ValueError("wrap_optimizer() was already called on this optimizer")
        wrapped = self._distributed.wrap_optimizer(
            optimizer, self.models, backward_passes_per_step, self.harness.state.aggregation_frequency
        )
        self.harness.optimizers.append(WrappedOptimizer(wrapped, backward_passes_per_step))
        return wrapped

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> LRScheduler:
        """Register an LR scheduler that the harness steps per ``step_mode`` every ``frequency``."""
        wrapped = LRScheduler(lr_scheduler, step_mode, frequency)
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and self.harness.find_optimizer(optimizer) is None:
            raise ValueError(
                "wrap_lr_scheduler(): the scheduler's optimizer was not returned by "
                "context.wrap_optimizer(); build the scheduler on the wrapped optimizer"
            )
        if step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP and optimizer is None:
            raise ValueError("STEP_EVERY_OPTIMIZER_STEP needs a scheduler with an .optimizer attribute")
        self.harness.lr.add(wrapped)
        return wrapped

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register a ``torch.amp.GradScaler`` so it is checkpointed.

        As in Determined, the trial scales its loss, passes the scaler to
        ``step_optimizer(opt, scaler=scaler)`` (which unscales and steps through it) and then
        calls ``scaler.update()`` itself; the harness never updates a wrapped scaler.
        """
        return self.harness.precision.add_scaler(scaler)

    def wrap_reducer(
        self,
        reducer: Union[Callable[[List[Any]], Any], MetricReducer],
        name: Optional[str] = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom metric reducer; returns the object to ``update()`` in the trial.

        A function receives the flat list of every value passed to ``update()`` (across all
        workers, in record order); a ``MetricReducer`` is reduced per slot then across slots.
        With ``name`` the result is one metric of that name; with ``name=None`` it must be a
        dict of metrics.
        """
        if any(r.reducer is reducer for r in self.harness.reducers):
            raise ReducerUseError(
                f"wrap_reducer() was already called on this {type(reducer).__name__}; wrap each reducer once"
            )
        wrapped = wrap_reducer(reducer, name, for_training, for_validation)
        if name is not None and any(r.name == name for r in self.harness.reducers):
            raise ReducerUseError(f"a reducer named {name!r} is already registered")
        self.harness.reducers.append(wrapped)
        return wrapped.reducer

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profile training with ``torch.profiler.profile(**kwargs)`` (Determined's API).

        As in Determined, ``on_trace_ready`` is the trial's TensorBoard directory and the harness
        steps the profiler after every training batch (from this run's first batch, which is
        what a ``schedule`` counts). ``fit`` runs det-lite's ``callbacks.Profiler`` with ``kwargs``.
        """
        if args:
            raise TypeError(
                "set_profiler() takes the keyword arguments of torch.profiler.profile "
                "(activities=..., schedule=..., record_shapes=..., ...), got positional arguments"
            )
        self.harness.profiler_kwargs = dict(kwargs)

    def configure_apex_amp(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "configure_apex_amp() needs NVIDIA apex, which determined_lite does not support; "
            "use native torch AMP instead: context.experimental.use_amp() for automatic mixed "
            "precision, or scaler = context.wrap_scaler(torch.amp.GradScaler('cuda')) with "
            "torch.autocast in train_batch, step_optimizer(opt, scaler=scaler), then scaler.update()"
        )

    def get_optimizer(self) -> torch.optim.Optimizer:
        """The single wrapped optimizer (Determined's older API)."""
        optimizers = self.optimizers
        if len(optimizers) != 1:
            raise RuntimeError(
                f"get_optimizer() needs exactly one wrapped optimizer, found {len(optimizers)}"
            )
        return optimizers[0]

    def get_model(self) -> torch.nn.Module:
        """The single wrapped model (Determined's older API)."""
        if len(self.models) != 1:
            raise RuntimeError(f"get_model() needs exactly one wrapped model, found {len(self.models)}")
        return self.models[0]

    # --- data -------------------------------------------------------------------------------
    def to_device(self, data: TorchData) -> TorchData:
        """Move tensors and numpy arrays (nested in dicts, lists, tuples) to this worker's device."""
        non_blocking = self.device.type == "cuda"
        return move_to_device(data, self.device, non_blocking, self._to_device_warned)

    # --- backward and step ------------------------------------------------------------------
    def backward(
        self,
        loss: torch.Tensor,
        gradient: Optional[torch.Tensor] = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """Compute gradients of ``loss`` (scaled for AMP when ``use_amp`` is on).

        A callback's ``on_before_backward`` may return the tensor to backpropagate instead
        (e.g. a scaled loss); ``loss`` itself, and so the metric the trial returns, is unchanged.
        """
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"backward() needs a torch.Tensor loss, got {type(loss).__name__}")
        callbacks = self.harness.callbacks
        target = callbacks.call_chain(Hook.ON_BEFORE_BACKWARD, loss)
        self.harness.precision.scale(target).backward(
            gradient=gradient, retain_graph=retain_graph, create_graph=create_graph
        )
        callbacks.call(Hook.ON_AFTER_BACKWARD, loss)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Optional[Callable[[Iterable[torch.nn.Parameter]], None]] = None,
        auto_zero_grads: bool = True,
        scaler: Optional[Any] = None,
    ) -> None:
        """Step ``optimizer`` on the last batch of each aggregation window; a no-op otherwise.

        At a step: gradients are communicated, unscaled, divided by the aggregation frequency
        (mean over the window), clipped by ``clip_grads(params)``, the optimizer steps, and the
        gradients are zeroed unless ``auto_zero_grads=False``.
        """
        step_optimizer(self.harness, optimizer, clip_grads, auto_zero_grads, scaler)
