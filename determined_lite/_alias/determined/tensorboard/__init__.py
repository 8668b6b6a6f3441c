"""``determined.tensorboard`` for det-lite: only ``metric_writers`` (TorchWriter)."""

from determined_lite.compat._install import missing_attribute as _missing_attribute

from . import metric_writers


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)


__all__ = ["metric_writers"]
