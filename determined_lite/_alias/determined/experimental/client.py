"""``determined.experimental.client``: det-lite's ``determined_lite.client`` under Determined's name."""

from determined_lite.client import *  # noqa: F401,F403
from determined_lite.client import __all__ as __all__
