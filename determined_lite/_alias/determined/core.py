"""``determined.core`` for det-lite: Determined's Core API names, bound to ``determined_lite.core``.

Importing it lets ``det.core.init()`` adopt the trial in a process that a trial's script started
itself (``launch._script.adopt``, registered with ``runtime._cluster.set_trial_adopter``)."""

import determined_lite.core as _det_lite_core
from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.launch._script import adopt as _adopt
from determined_lite.runtime._cluster import set_trial_adopter as _set_trial_adopter

__all__ = list(_det_lite_core.__all__)
globals().update({name: getattr(_det_lite_core, name) for name in __all__})

_set_trial_adopter(_adopt)


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
