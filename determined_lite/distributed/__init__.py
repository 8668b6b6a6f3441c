"""Who the workers are and how they talk: one context, several engines.

The training loop only ever calls a :class:`DistributedContext`. Backends: ``single`` (one
process), ``horovod`` (Horovod over Gloo/MPI/NCCL) and ``torch`` (torch.distributed, gloo on
CPU, nccl on CUDA). ``initialize(backend)`` joins the engine from the environment its launcher
set up (``horovodrun`` or ``torch.distributed.run``). Each engine's module is named by its
record in ``config._plugins.ENGINES`` and imported by ``engine(backend)`` on first use (its
class registers its backend with ``_base``; Horovod itself is imported only when its context
is made).
"""

from __future__ import annotations

from determined_lite.distributed._base import DistributedContext, PeerFailure, engine
from determined_lite.distributed._single import SingleProcessContext


def initialize(backend: str) -> DistributedContext:
    """The context of this worker for ``backend`` (``single`` or an engine's name)."""
    return engine(backend).from_environment()


__all__ = ["DistributedContext", "PeerFailure", "SingleProcessContext", "initialize"]
