"""``determined.common`` for det-lite: the parts of Determined's shared helpers that trial code
and Determined's own fixtures import (``determined.common.util``)."""

from determined_lite.compat._install import missing_attribute as _missing_attribute

from . import util

__all__ = ["util"]


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
