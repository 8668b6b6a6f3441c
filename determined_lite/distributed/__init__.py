"""Who the workers are and how they talk: one context, several engines.

The training loop only ever calls a :class:`DistributedContext`. Backends: ``single`` (one
process), ``horovod`` (Horovod over Gloo/MPI/NCCL) and ``torch`` (torch.distributed, gloo on
CPU, nccl on CUDA). ``initialize(backend)`` joins the engine from the environment its launcher
set up (``horovodrun`` or ``torch.distributed.run``).
"""

from __future__ import annotations

from determined_lite._timeouts import DEFAULT_TIMEOUT_S
from determined_lite.distributed._base import DistributedContext, PeerFailure
from determined_lite.distributed._single import SingleProcessContext


def initialize(backend: str) -> DistributedContext:
    """The context of this worker for ``backend`` (``single``, ``horovod`` or ``torch``)."""
    if backend == "single":
        return SingleProcessContext()
    if backend == "horovod":
        from determined_lite.distributed._horovod import HorovodContext

        return HorovodContext.from_environment()
    if backend == "torch":
        from determined_lite.distributed._torch import TorchDistributedContext

        return TorchDistributedContext.from_environment()
    raise ValueError(f"unknown distributed backend {backend!r}; expected single, horovod or torch")


__all__ = ["DEFAULT_TIMEOUT_S", "DistributedContext", "PeerFailure", "SingleProcessContext", "initialize"]
