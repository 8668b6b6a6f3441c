"""The Horovod engine: ranks from ``horovodrun``, collectives and gradients through Horovod.

Every byte between workers goes through Horovod's own collectives: object all-gathers and
broadcasts (``hvd.allgather_object``/``hvd.broadcast_object``), tensor broadcasts of the
initial state, and the gradient all-reduce of ``hvd.DistributedOptimizer``.

Gradients: the optimizer is wrapped in ``hvd.DistributedOptimizer(backward_passes_per_step =
bpps × aggregation_frequency, op=Average)``. Its hooks count the backward passes of each
parameter and start the all-reduce on the last pass of the aggregation window, so batches that
do not step need no special treatment (``no_sync`` is a no-op). At a step the context calls
:meth:`HorovodContext.synchronize` (wait for the all-reduce), divides by the aggregation
frequency, clips, and steps inside :meth:`HorovodContext.step_context`
(``skip_synchronize``), so gradients are averaged over ranks exactly once.

Timeouts: Gloo's rendezvous and every Gloo operation give up after
``HOROVOD_GLOO_TIMEOUT_SECONDS`` (default: ``DET_LITE_DIST_TIMEOUT``, 30 s), so a worker whose
process vanishes or whose Horovod stops answering makes its peers fail instead of wait forever.
A worker stuck in its own code (alive, its Horovod background thread still answering) holds
the others at their next collective: Horovod has no timeout for that case (its stall check did
not fire with Gloo in our tests), so such a trial has to be stopped from outside.

Failures: a worker that raises records its error (:meth:`HorovodContext.abort`, for the
launcher to report) and shuts Horovod down, which makes the collectives of the others raise
:class:`PeerFailure`; ``horovodrun`` stops every worker as soon as one exits with an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import sys
import threading
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Sequence, Tuple, TypeVar

import torch

from determined_lite.distributed._base import DistributedContext, PeerFailure

logger = logging.getLogger("determined_lite")

T = TypeVar("T")

# Horovod matches collectives across ranks by name: every rank must use the same name for the
# same call, whatever the type of its object (Horovod's default name is the type's name).
_ALLGATHER = "det_lite.allgather_object"
_BROADCAST = "det_lite.broadcast_object"


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` only follows from another worker's failure (Horovod shut down under it)."""
    from horovod.common.exceptions import HorovodInternalError

    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, (PeerFailure, HorovodInternalError)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def record_failure(error: BaseException, rank: int) -> None:
    """Record ``error`` for the horovodrun wrapper, which names the worker that failed first.

    The record is the launchers' failure protocol, imported here only on this failure path.
    """
    from determined_lite.runtime._failures import record_worker_failure

    record_worker_failure(error, rank)


def gloo_timeout_seconds() -> int:
    """Seconds Gloo waits for a peer (rendezvous and each operation): Horovod's env knob, else
    ``DET_LITE_DIST_TIMEOUT``."""
    from determined_lite._timeouts import dist_timeout

    value = os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS")
    return int(value) if value else max(1, math.ceil(dist_timeout()))


@dataclasses.dataclass(frozen=True)
class _TensorSlot:
    """Where a tensor sat in a broadcast structure; the tensor itself travels separately."""

    index: int
    shape: Tuple[int, ...]
    dtype: torch.dtype


class HorovodContext(DistributedContext, engine=True):
    """One worker of a job started by ``horovodrun`` (Gloo controller; MPI when built with it)."""

    backend = "horovod"

    def __init__(self, hvd: Any, **ranks: int) -> None:
        """``ranks``: the base's ``rank``, ``size``, ``local_rank``, ... as Horovod reports them."""
        super().__init__(**ranks)
        self._hvd = hvd
        self._closed = False
        from horovod.common.exceptions import HorovodInternalError

        self._internal_error = HorovodInternalError

    @classmethod
    def from_environment(cls) -> "HorovodContext":
        """``hvd.init()`` from the environment ``horovodrun`` set, with bounded Gloo timeouts."""
        try:
            import horovod.torch as hvd
        except ImportError as e:
            raise ImportError(
                "resources.distributed_backend 'horovod' needs Horovod built for this torch; "
                "install it with scripts/install-horovod.sh"
            ) from e
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(gloo_timeout_seconds()))
        hvd.init()
        return cls(
            hvd,
            rank=hvd.rank(),
            size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_size=hvd.local_size(),
            cross_rank=hvd.cross_rank(),
            cross_size=hvd.cross_size(),
        )

    # --- failures -----------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a Horovod collective; a shut-down engine becomes :class:`PeerFailure`."""
        try:
            return fn(*args, **kwargs)
        except self._internal_error as e:
            # Horovod's own chain (a RuntimeError inside its error) says nothing more: drop it.
            first = str(e).split(". ")[0].strip().rstrip(".")
            raise PeerFailure(
                f"rank {self.rank}: {what} failed because another worker failed or went away "
                f"(that worker reports the error); Horovod: {first}"
            ) from None

    # --- object collectives --------------------------------------------------------------------
    def allgather(self, obj: Any) -> List[Any]:
        if self.size == 1:
            return [obj]
        return self._call("allgather", self._hvd.allgather_object, obj, name=_ALLGATHER)

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast root must be a rank in [0, {self.size}), got {root}")
        if self.size == 1:
            return obj
        return self._call("broadcast", self._hvd.broadcast_object, obj, root_rank=root, name=_BROADCAST)

    def barrier(self) -> None:
        if self.size > 1:
            self._call("barrier", self._hvd.barrier)

    def is_peer_failure(self, error: BaseException) -> bool:
        """Whether ``error`` only reflects another worker's failure (see :func:`is_peer_failure`)."""
        return is_peer_failure(error)

    def close(self) -> None:
        """Shut Horovod down (every rank does, at the end of a trial)."""
        if self._closed:
            return
        self._closed = True
        self._hvd.shutdown()

    def record_failure(self, error: BaseException) -> None:
        """Record ``error`` for the horovodrun wrapper (``$DET_LITE_HOROVOD_FAILURE_PREFIX``)."""
        record_failure(error, self.rank)

    def abort(self, grace_s: float = 10.0) -> None:
        """Shut Horovod down after an error so peers blocked in collectives fail at once.

        Called while the error is handled: unless it is a :class:`PeerFailure` (the consequence
        of another worker's error), the error is recorded for the launcher, which names the
        worker that failed first. Horovod's shutdown tells every rank's background thread to
        stop; the peers' pending collectives then raise. Should the shutdown itself block (a
        peer that stopped answering), this process exits with status 1 after ``grace_s``
        seconds rather than hang, so that ``horovodrun`` sees it die and stops the others.
        """
        error = sys.exc_info()[1]
        if error is not None and not is_peer_failure(error):
            self.record_failure(error)
        if self._closed:
            return
        self._closed = True
        done = threading.Event()

        def shutdown() -> None:
            try:
                self._hvd.shutdown()
            finally:
                done.set()

        threading.Thread(target=shutdown, name="horovod-abort", daemon=True).start()
        if not done.wait(grace_s):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    # --- gradient engine ------------------------------------------------------------------------
    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        models: Sequence[torch.nn.Module],
        backward_passes_per_step: int,
        aggregation_frequency: int,
    ) -> torch.optim.Optimizer:
        """``hvd.DistributedOptimizer`` averaging gradients over ranks once per optimizer step:
        every ``backward_passes_per_step × aggregation_frequency`` backward passes."""
        if self.size == 1:
            return optimizer
        named = named_parameters(optimizer, models)
        grads = {id(p): p.grad for _, p in named}
        wrapped = self._hvd.DistributedOptimizer(
            optimizer,
            named_parameters=named,
            backward_passes_per_step=backward_passes_per_step * aggregation_frequency,
            op=self._hvd.Average,
        )
        # Horovod zero-fills every gradient when it registers its hooks; keep what was there
        # (None for a fresh model) so the first step sees what a single worker would.
        for _, p in named:
            p.grad = grads[id(p)]
        return wrapped

    def synchronize(self, optimizer: torch.optim.Optimizer) -> None:
        if hasattr(optimizer, "synchronize"):
            self._call("gradient all-reduce", optimizer.synchronize)

    def step_context(self, optimizer: torch.optim.Optimizer) -> ContextManager[None]:
        skip = getattr(optimizer, "skip_synchronize", None)
        return skip() if skip is not None else contextlib.nullcontext()

    def broadcast_initial_state(
        self, models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
    ) -> None:
        """Rank 0's parameters, buffers and optimizer state (including "no state yet") everywhere."""
        if self.size == 1:
            return
        for i, model in enumerate(models):
            tensors = [
                (f"det_lite.model{i}.{k}", t)
                for k, t in model.state_dict().items()
                if isinstance(t, torch.Tensor)
            ]
            self._broadcast_in_place(tensors, "model state")
        for i, opt in enumerate(optimizers):
            state = self._broadcast_tensors_tree(
                opt.state_dict() if self.rank == 0 else None, f"optimizer{i}"
            )
            if self.rank != 0:
                opt.load_state_dict(state)

    def _broadcast_in_place(self, tensors: List[Tuple[str, torch.Tensor]], what: str) -> None:
        def run() -> None:
            handles = [self._hvd.broadcast_async_(t, 0, name=name) for name, t in tensors]
            for h in handles:
                self._hvd.synchronize(h)

        self._call(f"broadcast of the {what}", run)

    def _broadcast_tensors_tree(self, tree: Any, label: str) -> Any:
        """``tree`` (nested dicts/lists/tuples holding tensors) from rank 0 on every rank.

        The structure travels as one pickled object; the tensors as Horovod tensor broadcasts
        (on the CPU, so a Gloo-only build carries them too).
        """
        tensors: List[torch.Tensor] = []
        skeleton = _strip_tensors(tree, tensors) if self.rank == 0 else None
        skeleton = self.broadcast(skeleton, root=0)
        if self.rank != 0:
            tensors = [torch.empty(s.shape, dtype=s.dtype) for s in _slots(skeleton)]
        # Rank 0 only sends, so its flat views may alias the live optimizer state.
        flat = [t.detach().to("cpu").contiguous().reshape(-1) for t in tensors]
        self._broadcast_in_place([(f"det_lite.{label}.{i}", t) for i, t in enumerate(flat)], f"{label} state")
        if self.rank == 0:
            return tree
        shaped = [t.reshape(s.shape) for t, s in zip(flat, _slots(skeleton))]
        return _fill_tensors(skeleton, shaped)


def named_parameters(
    optimizer: torch.optim.Optimizer, models: Sequence[torch.nn.Module]
) -> List[Tuple[str, torch.nn.Parameter]]:
    """A unique, rank-independent name for every parameter ``optimizer`` updates.

    Parameters of wrapped models are named ``model<i>.<name>``; any other parameter (built
    outside ``wrap_model``) ``group<g>.<j>`` after its place in the optimizer.
    """
    model_names: Dict[int, str] = {}
    for i, model in enumerate(models):
        for name, p in model.named_parameters():
            model_names.setdefault(id(p), f"model{i}.{name}")
    out: List[Tuple[str, torch.nn.Parameter]] = []
    seen = set()
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            if id(p) in seen:
                continue
            seen.add(id(p))
            out.append((model_names.get(id(p), f"group{g}.{j}"), p))
    return out


def _strip_tensors(tree: Any, out: List[torch.Tensor]) -> Any:
    if isinstance(tree, torch.Tensor):
        out.append(tree)
        return _TensorSlot(len(out) - 1, tuple(tree.shape), tree.dtype)
    if isinstance(tree, dict):
        return {k: _strip_tensors(v, out) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_strip_tensors(v, out) for v in tree]
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return tuple(_strip_tensors(v, out) for v in tree)
    return tree


def _walk_slots(tree: Any) -> Iterator[_TensorSlot]:
    if isinstance(tree, _TensorSlot):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _walk_slots(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _walk_slots(v)


def _slots(tree: Any) -> List[_TensorSlot]:
    return sorted(_walk_slots(tree), key=lambda s: s.index)


def _fill_tensors(tree: Any, tensors: List[torch.Tensor]) -> Any:
    if isinstance(tree, _TensorSlot):
        return tensors[tree.index]
    if isinstance(tree, dict):
        return {k: _fill_tensors(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_fill_tensors(v, tensors) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_fill_tensors(v, tensors) for v in tree)
    return tree
