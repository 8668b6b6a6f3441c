"""``determined.pytorch.samplers`` for det-lite: the classes of ``determined_lite.pytorch.samplers``."""

import determined_lite.pytorch.samplers as _det_lite_samplers

__all__ = list(_det_lite_samplers.__all__)
globals().update({name: getattr(_det_lite_samplers, name) for name in __all__})
