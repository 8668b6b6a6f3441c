"""``determined.core`` for det-lite: Determined's Core API names, bound to ``determined_lite.core``."""

import determined_lite.core as _det_lite_core
from determined_lite.compat._install import missing_attribute as _missing_attribute

__all__ = list(_det_lite_core.__all__)
globals().update({name: getattr(_det_lite_core, name) for name in __all__})


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
