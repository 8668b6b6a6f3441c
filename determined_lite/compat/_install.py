"""Putting det-lite's ``determined`` alias on the import path, only where no real one exists."""

from __future__ import annotations

import logging
import sys

from determined_lite.compat._detect import ALIAS_PATH, find_real_determined, is_alias_origin

logger = logging.getLogger("determined_lite")

# ALIAS_PATH is appended (never prepended) to sys.path, so any other ``determined`` on the path
# would still come first; sys.path also reaches DataLoader workers started with "spawn".


def alias_installed() -> bool:
    """Whether ``import determined`` in this process gives det-lite's alias."""
    if ALIAS_PATH not in sys.path:
        return False
    module = sys.modules.get("determined")
    if module is not None:
        return is_alias_origin(getattr(module, "__file__", None))

    return find_real_determined() is None


def install_alias() -> bool:
    """Make ``import determined`` give det-lite's alias, unless a real ``determined`` exists.

    Returns True when the alias is (now) what ``import determined`` gives. A ``determined``
    already imported, or importable from ``sys.path`` (a regular package or module, not a bare
    directory), is left alone and False is returned.
    """

    if ALIAS_PATH in sys.path:
        return alias_installed()
    real = find_real_determined()
    if real is not None:
        logger.info(
            "trial code that imports 'determined' gets the installed package at %s, not det-lite's alias",
            real,
        )
        return False
    sys.path.append(ALIAS_PATH)
    # A finder cached for this entry (had it been on the path before) is dropped; the import
    # system makes one for a new entry anyway. Not importlib.invalidate_caches(): it walks every
    # cached finder (~3 ms of CPU per trial worker, a twentieth of a small trial's fixed work).
    sys.path_importer_cache.pop(ALIAS_PATH, None)
    return True


_PROVIDES = (
    "det-lite's 'determined' alias provides Determined's PyTorchTrial API (determined.pytorch, "
    "determined.pytorch.samplers, determined.InvalidHP, "
    "determined.tensorboard.metric_writers.pytorch.TorchWriter) and its Core API (determined.core, "
    "determined.experimental.core_v2, det.get_cluster_info, determined.launch.wrap_rank, "
    "determined.common.util's group names) "
    "and its Python SDK over det-lite's store (determined.experimental.client), "
    "not its other APIs; see docs/migrating-from-determined.md"
)


def missing_attribute(module: str, name: str) -> AttributeError:
    """The error for a Determined name the alias does not provide."""
    return AttributeError(f"module {module!r} has no attribute {name!r}: {_PROVIDES}")


class MissingSubmoduleFinder:
    """Last on ``sys.meta_path`` once the alias is imported: ``import determined.core`` (or any
    ``determined.*`` module the alias lacks) fails with a message saying why, not just
    "No module named"."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name.startswith("determined.") and "determined" in sys.modules:
            if is_alias_origin(getattr(sys.modules["determined"], "__file__", None)):
                # name=None: a plain "from determined import core" must not swallow it.
                raise ModuleNotFoundError(f"cannot import {name!r}: {_PROVIDES}")
        return None

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(f, cls) or f is cls for f in sys.meta_path):
            sys.meta_path.append(cls)
