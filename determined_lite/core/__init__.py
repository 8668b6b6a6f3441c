"""Determined's Core API (``determined.core``) for scripts det-lite runs, backed by its store.

``with det.core.init(distributed=...) as core_context:`` gives ``train`` (metrics, progress,
early exit), ``checkpoint`` (``store_path``, ``restore_path``, ``upload``, ``download``,
``get_metadata``, ``delete``), ``searcher`` (legacy ``operations()``), ``preempt``
(``should_preempt()``: pause/kill) and ``distributed``. See docs/migrating-from-determined.md for
what is and is not provided.
"""

from determined_lite.core._checkpoint import CheckpointContext, DownloadMode
from determined_lite.core._context import Context, TensorboardMode, init
from determined_lite.core._preempt import PreemptContext, PreemptMode
from determined_lite.core._searcher import SearcherContext, SearcherMode, SearcherOperation, Unit
from determined_lite.core._train import EarlyExitReason, TrainContext
from determined_lite.distributed import DistributedContext
from determined_lite.distributed import SingleProcessContext as DummyDistributedContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyDistributedContext",
    "EarlyExitReason",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
]
