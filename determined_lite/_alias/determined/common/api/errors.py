"""``determined.common.api.errors``: det-lite's SDK error types (``determined_lite.client``),
under Determined's module name."""

from determined_lite.client._errors import *  # noqa: F401,F403
from determined_lite.client._errors import __all__ as __all__
