"""det-lite's stand-in for Determined's ``determined`` package (see ``determined_lite.compat``).

Every name is det-lite's own object (``determined.InvalidHP is determined_lite.InvalidHP``), so
trial code written for Determined runs under det-lite's harness unchanged.
"""

import logging as _logging

from determined_lite import __version__ as __version__
from determined_lite._errors import InvalidHP as InvalidHP
from determined_lite.compat import import_from_path as import_from_path
from determined_lite.compat._install import MissingSubmoduleFinder as _MissingSubmoduleFinder
from determined_lite.compat._install import missing_attribute as _missing_attribute
from determined_lite.pytorch import PyTorchTrialContext as TrialContext
from determined_lite.runtime._cluster import ClusterInfo as ClusterInfo
from determined_lite.runtime._cluster import ClusterTrialInfo as TrialInfo
from determined_lite.runtime._cluster import get_cluster_info as get_cluster_info

from . import common, core, errors, pytorch, tensorboard

__det_lite_alias__ = True

# Determined's log line format (its harness configures logging with it).
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)


_MissingSubmoduleFinder.install()
_logging.getLogger("determined_lite").info(
    "trial imports 'determined': det-lite's compatibility alias (determined_lite %s)", __version__
)

__all__ = [
    "ClusterInfo",
    "InvalidHP",
    "LOG_FORMAT",
    "TrialContext",
    "TrialInfo",
    "common",
    "core",
    "errors",
    "get_cluster_info",
    "import_from_path",
    "pytorch",
    "tensorboard",
]
