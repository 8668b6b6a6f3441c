"""The interface every distributed backend implements, and the training loop relies on."""

from __future__ import annotations

import abc
import contextlib
import importlib
from typing import Any, ContextManager, Dict, Iterable, List, Sequence, Type

import torch

from determined_lite.config._plugins import ENGINES, SINGLE_CONTEXT_MODULE, SINGLE_ENGINE

_NULL = contextlib.nullcontext()  # reusable: nullcontext keeps no state

# backend name -> its context class, filled as the engines' modules define them (each imported
# by engine() on first use, from its record in config._plugins.ENGINES).
_ENGINES: Dict[str, Type["DistributedContext"]] = {}


class PeerFailure(RuntimeError):
    """A collective failed because another worker failed or went away first.

    That worker reports the original error; this one only says that it stopped.
    """


class _Constructible(abc.ABCMeta):
    """``DistributedContext(rank=..., size=..., ..., chief_ip=...)`` itself, as Determined's
    scripts call it, joins the torch engine's group (``TorchDistributedContext.from_ranks``)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is DistributedContext:
            return engine("torch").from_ranks(*args, **kwargs)  # type: ignore[attr-defined]
        return super().__call__(*args, **kwargs)


class DistributedContext(abc.ABC, metaclass=_Constructible):
    """Rank information, object collectives and the gradient engine of one worker.

    Object collectives (``allgather``, ``broadcast``) carry picklable Python objects through the
    engine's own collectives; the gradient hooks let the loop stay identical for every engine.
    """

    backend: str = "abstract"

    def __init_subclass__(cls, engine: bool = False, **kwargs: Any) -> None:
        """An engine's class (``class X(DistributedContext, engine=True)``) registers under its
        ``backend`` name; the package imports them all. The base reaches its engines through
        :func:`engine`, never by importing them; other subclasses (tests' fakes) register nothing."""
        super().__init_subclass__(**kwargs)
        if engine:
            _ENGINES[cls.backend] = cls

    def __init__(
        self,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
    ) -> None:
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size

    # Determined's accessor names.
    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        """Machines the workers run on (Determined's name for the cross size)."""
        return self.cross_size

    @classmethod
    def from_environment(cls) -> "DistributedContext":
        """Join this engine from the environment its launcher set up."""
        raise NotImplementedError(f"{cls.__name__} has no environment to join")

    # Determined's constructors (``det.core.DistributedContext.from_*``).
    @classmethod
    def from_torch_distributed(cls, chief_ip: Any = None) -> "DistributedContext":
        """The torch.distributed context of this worker: in a trial det-lite runs, the one its
        worker joined (one slot: the single-process context); otherwise torchrun's environment."""
        return _joined("torch") or engine("torch").from_environment()

    @classmethod
    def from_horovod(cls, hvd: Any = None, chief_ip: Any = None) -> "DistributedContext":
        """The Horovod context of this worker: in a trial det-lite runs, the one its worker
        joined (one slot: the single-process context); otherwise horovodrun's environment."""
        return _joined("horovod") or engine("horovod").from_environment()

    @classmethod
    def from_deepspeed(cls, chief_ip: Any = None) -> "DistributedContext":
        raise NotImplementedError("det-lite does not run DeepSpeed; use from_torch_distributed()")

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    # --- object collectives -------------------------------------------------------------
    @abc.abstractmethod
    def allgather(self, obj: Any) -> List[Any]:
        """Every rank's ``obj``, ordered by rank, on every rank."""

    @abc.abstractmethod
    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """``obj`` from ``root`` on every rank."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait until every rank arrives."""

    def gather(self, obj: Any, root: int = 0) -> List[Any] | None:
        """Every rank's ``obj`` on ``root`` (ordered by rank), ``None`` elsewhere."""
        gathered = self.allgather(obj)
        return gathered if self.rank == root else None

    # Determined's per-machine collectives, over the object collectives.
    def allgather_local(self, obj: Any) -> List[Any]:
        """Every rank's ``obj`` of this machine, ordered by local rank."""
        pairs = self.allgather((self.cross_rank, self.local_rank, obj))
        return [o for _, _, o in sorted(p for p in pairs if p[0] == self.cross_rank)]

    def gather_local(self, obj: Any) -> List[Any] | None:
        """This machine's ``obj``s on its local chief, ``None`` elsewhere."""
        gathered = self.allgather_local(obj)
        return gathered if self.local_rank == 0 else None

    def broadcast_local(self, obj: Any = None) -> Any:
        """The local chief's ``obj`` on every rank of its machine."""
        return self.allgather_local(obj)[0]

    def close(self) -> None:
        """Release the engine's resources."""

    def is_peer_failure(self, error: BaseException) -> bool:
        """Whether ``error`` only says that another worker failed (so this one need not report it)."""
        return isinstance(error, PeerFailure)

    def record_failure(self, error: BaseException) -> None:
        """Record ``error`` where this engine's launcher looks for the error a worker failed
        with (nothing for a single process: its result says it)."""

    def abort(self) -> None:
        """Tear down after an error on this worker so peers blocked in collectives fail fast."""
        self.close()

    # --- gradient engine ------------------------------------------------------------------
    def wrap_model(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model the trial trains (e.g. DDP around it); called once per ``wrap_model``."""
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        models: Sequence[torch.nn.Module],
        backward_passes_per_step: int,
        aggregation_frequency: int,
    ) -> torch.optim.Optimizer:
        """The optimizer the trial steps (e.g. Horovod's DistributedOptimizer).

        ``backward_passes_per_step``: backward passes per training batch (the trial's
        ``wrap_optimizer`` argument); a step follows ``backward_passes_per_step ×
        aggregation_frequency`` of them.
        """
        return optimizer

    def no_sync(self, models: Iterable[torch.nn.Module]) -> ContextManager[None]:
        """Suspend gradient communication for a batch that does not step the optimizers."""
        return _NULL

    def batch_context(self, models: Sequence[torch.nn.Module], step_batch: bool) -> ContextManager[Any]:
        """Context of one training batch: gradient communication only on optimizer-step batches."""
        return _NULL if step_batch else self.no_sync(models)

    def synchronize(self, optimizer: torch.optim.Optimizer) -> None:
        """Finish gradient communication for ``optimizer`` before it is clipped and stepped."""

    def step_context(self, optimizer: torch.optim.Optimizer) -> ContextManager[None]:
        """Context in which ``optimizer.step()`` runs after :meth:`synchronize`."""
        return _NULL

    def broadcast_initial_state(
        self, models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
    ) -> None:
        """Make every rank start from rank 0's parameters and optimizer state."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size}, backend={self.backend!r})"


def _joined(backend: str) -> "DistributedContext | None":
    """The context the worker of a det-lite script trial joined, when it suits ``backend``."""
    from determined_lite.runtime._cluster import active_trial

    trial = active_trial()
    if trial is None:
        return None
    dist: DistributedContext = trial.distributed
    if dist.size > 1 and dist.backend != backend:
        raise RuntimeError(
            f"the script asks for a {backend} context but the trial runs on {dist.backend} "
            f"(resources.distributed_backend: {backend!r} to change it)"
        )
    return dist


def engine(backend: str) -> Type[DistributedContext]:
    """The context class of ``backend`` (``single`` or a name in ``config._plugins.ENGINES``),
    its module imported now when it was not."""
    if backend not in _ENGINES:
        module = SINGLE_CONTEXT_MODULE if backend == SINGLE_ENGINE else None
        if backend in ENGINES:
            module = ENGINES[backend].context_module
        if module is None:
            names = ", ".join([SINGLE_ENGINE, *ENGINES])
            raise ValueError(f"unknown distributed backend {backend!r}; expected one of {names}")
        importlib.import_module(module)
    return _ENGINES[backend]
