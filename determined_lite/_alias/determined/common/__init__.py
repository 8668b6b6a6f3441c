"""``determined.common`` for det-lite: the parts of Determined's shared helpers that trial code
and Determined's own fixtures import (``determined.common.util``), and the SDK's error types
(``determined.common.api.errors``, imported when first used: trial code never pays for the SDK)."""

import importlib as _importlib

from determined_lite.compat._install import missing_attribute as _missing_attribute

from . import util

__all__ = ["api", "util"]


def __getattr__(name: str) -> object:
    if name == "api":
        return _importlib.import_module(f"{__name__}.api")
    raise _missing_attribute(__name__, name)
