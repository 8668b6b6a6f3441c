"""``determined.launch`` for det-lite: ``wrap_rank`` (``python3 -m determined.launch.wrap_rank``).

Determined's other launchers (``determined.launch.torch_distributed``, ``.horovod``) are read
from a config's entrypoint by det-lite and never run as modules."""

from determined_lite.compat._install import missing_attribute as _missing_attribute


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
