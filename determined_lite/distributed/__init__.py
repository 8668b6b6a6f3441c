"""Who the workers are and how they talk: one context, several engines.

The training loop only ever calls a :class:`DistributedContext`. Backends: ``single`` (one
process), ``horovod`` (Horovod over Gloo/MPI/NCCL) and ``torch`` (torch.distributed, gloo on
CPU, nccl on CUDA). ``initialize(backend)`` joins the engine from the environment its launcher
set up (``horovodrun`` or ``torch.distributed.run``).
"""

from __future__ import annotations

import os

from determined_lite.distributed._base import DistributedContext, PeerFailure
from determined_lite.distributed._single import SingleProcessContext

# Seconds a worker may wait to join the group (collectives: $DET_LITE_COLLECTIVE_TIMEOUT, 1800).
DEFAULT_TIMEOUT_S = float(os.environ.get("DET_LITE_DIST_TIMEOUT", "30"))


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
