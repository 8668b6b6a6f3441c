"""The interface every distributed backend implements, and the training loop relies on."""

from __future__ import annotations

import abc
import contextlib
from typing import Any, ContextManager, Iterable, List, Sequence

import torch

_NULL = contextlib.nullcontext()  # reusable: nullcontext keeps no state


class PeerFailure(RuntimeError):
    """A collective failed because another worker failed or went away first.

    That worker reports the original error; this one only says that it stopped.
    """


class DistributedContext(abc.ABC):
    """Rank information, object collectives and the gradient engine of one worker.

    Object collectives (``allgather``, ``broadcast``) carry picklable Python objects through the
    engine's own collectives; the gradient hooks let the loop stay identical for every engine.
    """

    backend: str = "abstract"

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
