"""``determined.experimental.core_v2``: Determined's singleton Core API over det-lite
(``determined_lite.client._core_v2``). ``core_v2.train``, ``.checkpoint``, ``.distributed``,
``.preempt``, ``.searcher`` and ``.info`` are read from there: always the current context's."""

from determined_lite.client import _core_v2
from determined_lite.client._core_v2 import (
    Config,
    DefaultConfig,
    UnmanagedConfig,
    close,
    init,
    init_context,
    url_reverse_webui_exp_view,
)
from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.core import DistributedContext, PreemptMode, TensorboardMode

__all__ = [
    "Config",
    "DefaultConfig",
    "DistributedContext",
    "PreemptMode",
    "TensorboardMode",
    "UnmanagedConfig",
    "close",
    "init",
    "init_context",
    "url_reverse_webui_exp_view",
    *_core_v2.SINGLETONS,
]


def __getattr__(name: str) -> object:
    if name in _core_v2.SINGLETONS:
        return getattr(_core_v2, name)
    raise _missing_attribute(__name__, name)
