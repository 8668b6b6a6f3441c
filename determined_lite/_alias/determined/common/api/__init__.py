"""``determined.common.api`` for det-lite: the error types of Determined's SDK
(``determined.common.api.errors``), which det-lite's ``determined.experimental.client`` raises."""

from determined_lite.compat._install import missing_attribute as _missing_attribute

from . import errors

__all__ = ["errors"]


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
