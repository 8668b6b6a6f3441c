"""``determined.pytorch`` for det-lite: Determined's trial API names, bound to det-lite's objects.

It mirrors ``determined_lite.pytorch.__all__``, so every name det-lite exports is here too.
"""

import determined_lite.pytorch as _det_lite_pytorch
from determined_lite.compat._install import missing_attribute as _missing_attribute

from . import samplers  # noqa: F401 -- listed in __all__ (from det-lite's)

__all__ = list(_det_lite_pytorch.__all__)
globals().update({name: getattr(_det_lite_pytorch, name) for name in __all__ if name != "samplers"})


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
