"""``determined.core`` for det-lite: Determined's Core API names, bound to ``determined_lite.core``.

``init`` first adopts the trial in a process that a trial's script started itself
(``determined_lite.launch._script_workers``), then is ``determined_lite.core.init``."""

from typing import Any

import determined_lite.core as _det_lite_core
from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.launch._script import adopt as _adopt

__all__ = list(_det_lite_core.__all__)
globals().update({name: getattr(_det_lite_core, name) for name in __all__})


def init(**kwargs: Any) -> Any:  # noqa: F811 -- wraps determined_lite.core.init
    _adopt(kwargs.get("distributed"))
    return _det_lite_core.init(**kwargs)


init.__doc__ = _det_lite_core.init.__doc__


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
