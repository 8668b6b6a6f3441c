"""The torch.distributed backend: gloo on CPU, nccl on CUDA, gradients through DDP.

Workers are started by ``torch.distributed.run`` (see ``determined_lite.launch._torchrun``),
which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``GROUP_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``. :meth:`TorchDistributedContext.from_environment`
joins that group; object collectives use torch.distributed's own ``all_gather_object`` and
``broadcast_object_list``.

Gradients: every wrapped model becomes a :class:`ForwardingDDP` (a ``DistributedDataParallel``
that still answers the trial's ``self.model.weight`` and other attributes of the inner module).
DDP averages gradients over ranks during ``backward``; batches that do not step the optimizer
run under ``no_sync()`` so that one all-reduce carries a whole aggregation window.

DDP reduces in the first backward pass after a synchronised forward pass, so it cannot serve a
trial with several backward passes per batch (``wrap_optimizer(backward_passes_per_step > 1)``):
the later passes would stay local to each rank. Once an optimizer is wrapped that way, every
batch runs under ``no_sync()`` and :meth:`TorchDistributedContext.synchronize` averages each
optimizer's accumulated gradients in one all-reduce per dtype before its step (step batches start
by broadcasting rank 0's buffers, as DDP's synchronised forward passes do).

DDP options come from ``resources.ddp_options`` of the experiment config: the launcher passes
them to every worker in ``$DET_LITE_DDP_OPTIONS`` (JSON), or a caller hands them to
``from_environment(ddp_options=...)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import gc
import inspect
import json
import logging
import os
import signal
import sys
import threading
from typing import Any, ContextManager, Dict, Iterable, List, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from determined_lite._timeouts import collective_timeout as collective_timeout_s
from determined_lite.config._resources import (  # resources.ddp_options: the schema's DDPOptions
    DDP_OPTIONS_ENV,
    check_ddp_options,
)
from determined_lite.distributed._base import DistributedContext, PeerFailure
from determined_lite.distributed._timeout import collective_timeout, is_collective_timeout

logger = logging.getLogger("determined_lite")


# Seconds a worker that failed may spend tearing down before it is forced out.
ABORT_GRACE_S = 10.0


def _ddp_kwargs(options: Mapping[str, Any]) -> Dict[str, Any]:
    """DDP constructor arguments; ``broadcast_buffers`` maps to its newer name where torch has it."""
    kwargs = dict(options)
    if "broadcast_buffers" in kwargs and "forward_sync_buffers" in _ddp_parameters():
        kwargs["forward_sync_buffers"] = kwargs.pop("broadcast_buffers")
    return kwargs


def _ddp_parameters() -> Sequence[str]:
    return list(inspect.signature(DistributedDataParallel.__init__).parameters)


class ForwardingDDP(DistributedDataParallel):
    """``DistributedDataParallel`` that forwards unknown attributes to the wrapped module.

    Trials written for one process use ``self.model.weight`` or ``self.model.some_method()``;
    plain DDP hides those behind ``.module``. Forward passes without autograd (validation,
    ``torch.no_grad`` blocks) go straight to the module: DDP would otherwise sync buffers
    from rank 0 there, a collective that ranks holding different numbers of validation batches
    could not match.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(super().__getattr__("module"), name)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.module(*inputs, **kwargs)
        return super().forward(*inputs, **kwargs)


def _env_int(name: str, default: Optional[int] = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise RuntimeError(
                f"${name} is not set: the torch backend runs in workers started by "
                "torch.distributed.run (det-lite's launcher starts them for "
                "resources.distributed_backend: torch)"
            )
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"${name} must be an integer, got {value!r}") from None


def _die_with_parent() -> None:
    """Get SIGKILL when the torchrun agent that started this worker dies (Linux).

    torchrun starts each worker in its own session, so a killed agent would otherwise leave
    workers training on their own.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the agent died before prctl took effect
        os._exit(1)


# Text of the errors gloo and NCCL raise in a worker whose peer died or hung up.
_PEER_FAILURE_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "/gloo/transport/",
    "NCCL communicator was aborted",
    "ncclRemoteError",
)


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` only says that another worker failed first (its own error is the story).
    A timeout is not one: the rank that did not arrive may still be running."""
    if is_collective_timeout(error):
        return False
    if isinstance(error, PeerFailure) or isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(m in text for m in _PEER_FAILURE_MARKERS)


class TorchDistributedContext(DistributedContext, engine=True):
    """One worker of a ``torch.distributed`` process group (gloo on CPU, nccl on CUDA)."""

    backend = "torch"

    def __init__(
        self, *, device: torch.device, ddp_options: Optional[Mapping[str, Any]] = None, **ranks: int
    ) -> None:
        """``ranks``: the base's ``rank``, ``size``, ``local_rank``, ... as torchrun sets them."""
        super().__init__(**ranks)
        self.device = device
        self.ddp_options = check_ddp_options(ddp_options)
        self._ddp_kwargs = _ddp_kwargs(self.ddp_options)
        self._closed = False
        # Gradients are averaged by synchronize(), not by DDP's backward hooks (set when an
        # optimizer takes several backward passes per batch).
        self._explicit_reduce = False

    @classmethod
    def from_environment(
        cls,
        ddp_options: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        collective_timeout: Optional[float] = None,
    ) -> "TorchDistributedContext":
        """Join the process group described by torchrun's environment variables.

        ``ddp_options`` default to ``$DET_LITE_DDP_OPTIONS`` (JSON, set by the launcher).
        ``timeout`` (seconds) bounds joining the group: default ``$DET_LITE_DIST_TIMEOUT`` (30).
        ``collective_timeout`` bounds each collective once joined: default
        ``$DET_LITE_COLLECTIVE_TIMEOUT`` (1800, torch's own default). It is long on purpose:
        other ranks legitimately wait in a collective while the chief evaluates a whole
        validation set or writes a checkpoint. A worker that dies or raises does not make its
        peers wait for it: torchrun stops them within a fraction of a second.
        """
        from determined_lite._timeouts import dist_timeout

        if ddp_options is None and os.environ.get(DDP_OPTIONS_ENV):
            try:
                ddp_options = json.loads(os.environ[DDP_OPTIONS_ENV])
            except json.JSONDecodeError as e:
                raise ValueError(f"${DDP_OPTIONS_ENV} is not valid JSON: {e}") from None
        options = check_ddp_options(ddp_options)
        if os.environ.get("TORCHELASTIC_RUN_ID"):
            _die_with_parent()
        rank, size = _env_int("RANK"), _env_int("WORLD_SIZE")
        local_rank = _env_int("LOCAL_RANK", rank)
        local_size = _env_int("LOCAL_WORLD_SIZE", size)
        cross_rank = _env_int("GROUP_RANK", rank // max(local_size, 1))
        cross_size = _env_int("GROUP_WORLD_SIZE", max(1, size // max(local_size, 1)))
        if torch.cuda.is_available():
            device = torch.device("cuda", local_rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        seconds = dist_timeout() if timeout is None else float(timeout)
        if not dist.is_initialized():
            _join_group(device, rank, size, seconds, collective_timeout)
        return cls(
            device=device,
            ddp_options=options,
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=cross_size,
        )

    @classmethod
    def from_ranks(cls, **ranks: Any) -> "TorchDistributedContext":
        """Determined's ``det.core.DistributedContext(rank=..., ..., chief_ip=...)``: see
        ``distributed._ranks``."""
        from determined_lite.distributed._ranks import join_group

        device = join_group(**ranks)
        names = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")
        r = {k: int(ranks[k]) for k in names}
        return cls(device=device, ddp_options=None, **r)

    def is_peer_failure(self, error: BaseException) -> bool:
        """Whether ``error`` only reflects another worker's failure (see :func:`is_peer_failure`)."""
        return is_peer_failure(error)

    # --- object collectives -------------------------------------------------------------
    def _collective(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:  # DistError subclasses RuntimeError
            if is_collective_timeout(e):
                raise collective_timeout(e, what, self.rank) from e
            raise PeerFailure(
                f"{what} failed, most likely because another worker failed or exited (that "
                f"worker reports its own error): {type(e).__name__}: {e}"
            ) from e

    def allgather(self, obj: Any) -> List[Any]:
        if self.size == 1:
            return [obj]
        out: List[Any] = [None] * self.size
        self._collective("allgather", dist.all_gather_object, out, obj)
        return out

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast root must be a rank in [0, {self.size}), got {root}")
        if self.size == 1:
            return obj
        box = [obj if self.rank == root else None]
        self._collective("broadcast", dist.broadcast_object_list, box, src=root)
        return box[0]

    def barrier(self) -> None:
        if self.size == 1:
            return
        kwargs = {"device_ids": [self.device.index]} if self.device.type == "cuda" else {}
        self._collective("barrier", dist.barrier, **kwargs)

    # --- gradient engine ----------------------------------------------------------------
    def wrap_model(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """A :class:`ForwardingDDP` around ``model`` (models without trainable parameters as they are)."""
        if not any(p.requires_grad for p in model.parameters()):
            logger.info("%s has no trainable parameters; not wrapped in DDP", type(model).__name__)
            return model
        device_ids = [device.index if device.index is not None else 0] if device.type == "cuda" else None
        return ForwardingDDP(model, device_ids=device_ids, **self._ddp_kwargs)

    def no_sync(self, models: Iterable[torch.nn.Module]) -> ContextManager[Any]:
        ddp = [m for m in models if isinstance(m, DistributedDataParallel)]
        if not ddp:
            return contextlib.nullcontext()
        if len(ddp) == 1:
            return ddp[0].no_sync()
        stack = contextlib.ExitStack()
        for m in ddp:
            stack.enter_context(m.no_sync())
        return stack

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        models: Sequence[torch.nn.Module],
        backward_passes_per_step: int,
        aggregation_frequency: int,
    ) -> torch.optim.Optimizer:
        """``optimizer`` itself; several backward passes per batch switch to explicit averaging."""
        if backward_passes_per_step > 1 and self.size > 1:
            self._explicit_reduce = True
        return optimizer

    def batch_context(self, models: Sequence[torch.nn.Module], step_batch: bool) -> ContextManager[Any]:
        """DDP communicates on step batches; under explicit averaging it never does (buffers
        are broadcast from rank 0 before a step batch instead)."""
        if not self._explicit_reduce:
            return contextlib.nullcontext() if step_batch else self.no_sync(models)
        if step_batch and self.ddp_options.get("broadcast_buffers", True):
            ddp = [m for m in models if isinstance(m, DistributedDataParallel)]
            buffers = [b for m in ddp for b in m.module.buffers()]
            if buffers:
                with torch.no_grad():
                    _broadcast_tensors(buffers, root=0)
        return self.no_sync(models)

    def synchronize(self, optimizer: torch.optim.Optimizer) -> None:
        """Under explicit averaging: the mean over ranks of ``optimizer``'s gradients, as DDP
        computes it (a rank without a gradient for a parameter contributes zeros; a parameter
        no rank has a gradient for keeps ``None``)."""
        if not self._explicit_reduce:
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        groups: Dict[Any, List[torch.Tensor]] = {}
        for p in params:
            if p.grad is not None and p.grad.is_sparse:
                raise RuntimeError(
                    "sparse gradients cannot be averaged with backward_passes_per_step > 1 on the "
                    "torch backend; use resources.distributed_backend: horovod"
                )
            groups.setdefault((p.device, p.dtype), []).append(p)
        for (device, dtype), group in groups.items():
            # One message per device and dtype: the gradients, then one "has a gradient" flag each.
            parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group]
            flags = torch.tensor([p.grad is not None for p in group], dtype=dtype, device=device)
            flat = torch.cat(parts + [flags])
            self._collective("gradient all-reduce", dist.all_reduce, flat)
            has_grad = flat[-len(group) :].tolist()
            offset = 0
            for p, flag in zip(group, has_grad):
                n = p.numel()
                grad = flat[offset : offset + n].view_as(p).div_(self.size)
                offset += n
                if p.grad is not None:
                    p.grad.copy_(grad)
                elif flag > 0:
                    p.grad = grad.clone()

    def broadcast_initial_state(
        self, models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
    ) -> None:
        """Rank 0's parameters, buffers and (non-empty) optimizer state on every rank."""
        if self.size == 1:
            return
        tensors = [t for m in models for t in list(m.parameters()) + list(m.buffers())]
        with torch.no_grad():
            _broadcast_tensors(tensors, root=0)
        has_state = self.broadcast([bool(opt.state) for opt in optimizers] if self.rank == 0 else None)
        for opt, flag in zip(optimizers, has_state):
            if not flag:  # fresh on rank 0: nothing to send, and no rank keeps a state of its own
                opt.state.clear()
                continue
            state = _to_cpu(opt.state_dict()) if self.rank == 0 else None
            state = self.broadcast(state)
            if self.rank != 0:
                opt.load_state_dict(state)

    # --- teardown -----------------------------------------------------------------------
    def close(self) -> None:
        """Leave the process group (every rank calls it at the end of a successful run)."""
        if self._closed:
            return
        self._closed = True
        if dist.is_initialized():
            # DDP models of the finished trial hold the process group; freeing them first lets it
            # shut down now, not at interpreter exit (where gloo's threads can abort the process).
            gc.collect()
            dist.destroy_process_group()

    def record_failure(self, error: BaseException) -> None:
        """Write ``error`` to torchrun's error file for this worker."""
        _record_error(error)

    def abort(self) -> None:
        """Tear down after an error on this worker without waiting on peers.

        Called while the error is being handled: it is recorded in torchrun's error file for
        this worker (so the launcher can name the failing rank and its exception), unless it
        is only the consequence of another worker's failure. A watchdog ends the process if
        teardown itself blocks.
        """
        error = sys.exc_info()[1]
        if error is not None and is_collective_timeout(error):
            what = "a collective (e.g. DDP's gradient allreduce)"
            self.record_failure(collective_timeout(error, what, self.rank))
        elif error is not None and not is_peer_failure(error):
            self.record_failure(error)
        timer = threading.Timer(ABORT_GRACE_S, os._exit, args=(1,))
        timer.daemon = True
        timer.start()
        if self._closed:
            return
        self._closed = True
        if not dist.is_initialized():
            return
        abort_group = getattr(dist.distributed_c10d, "_abort_process_group", None)
        try:
            if abort_group is not None and dist.get_backend() == "nccl":
                abort_group()
            else:
                dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 -- teardown after a failure must not raise again
            logger.debug("process group teardown after failure: %s", e)


def _join_group(
    device: torch.device, rank: int, size: int, seconds: float, collective_timeout: Optional[float]
) -> None:
    """Join torchrun's process group (nccl on CUDA, gloo on CPU) within ``seconds``; each
    collective then waits up to ``collective_timeout`` (default ``$DET_LITE_COLLECTIVE_TIMEOUT``)."""
    engine = "nccl" if device.type == "cuda" else "gloo"
    kwargs: Dict[str, Any] = {}
    if engine == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=engine,
        init_method="env://",
        rank=rank,
        world_size=size,
        timeout=datetime.timedelta(seconds=seconds),
        **kwargs,
    )
    if collective_timeout is None:
        collective_timeout = collective_timeout_s()
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if set_timeout is not None and collective_timeout != seconds:
        set_timeout(datetime.timedelta(seconds=float(collective_timeout)))


def _record_error(error: BaseException) -> None:
    """Write ``error`` to ``$TORCHELASTIC_ERROR_FILE`` (torchrun's per-worker failure report)."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    try:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(error)
    except Exception as e:  # noqa: BLE001 -- the error itself is already on stderr
        logger.debug("could not record the error for torchrun: %s", e)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _broadcast_tensors(tensors: Sequence[torch.Tensor], root: int) -> None:
    """Broadcast ``tensors`` in place from ``root``: one flat message per device and dtype."""
    groups: Dict[Any, List[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    for (_, dtype), group in groups.items():
        flat = torch.cat([t.detach().reshape(-1) for t in group])
        if dtype == torch.bool:  # gloo has no bool collectives
            flat = flat.to(torch.uint8)
        try:
            dist.broadcast(flat, src=root)
        except RuntimeError as e:
            raise PeerFailure(f"broadcast of the initial model state failed: {e}") from e
        offset = 0
        for t in group:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t).to(dtype))
            offset += n
