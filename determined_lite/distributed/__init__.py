"""Who the workers are and how they talk: one context, several engines.

The training loop only ever calls a :class:`DistributedContext`; the single-process backend
lives here, Horovod and torch.distributed plug in behind the same interface.
"""

from determined_lite.distributed._base import DistributedContext
from determined_lite.distributed._single import SingleProcessContext

__all__ = ["DistributedContext", "SingleProcessContext"]
