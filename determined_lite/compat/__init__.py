"""Run trial code written for Determined (``import determined as det``) unchanged.

Determined's development has stopped; a context directory written against
``determined.pytorch`` should run with ``det-lite experiment create`` without edits. This
package provides ``determined`` as an alias of det-lite's objects:

- :func:`install_alias` makes ``import determined`` (``determined.pytorch``,
  ``determined.pytorch.samplers``, ``determined.tensorboard.metric_writers.pytorch``) resolve
  to modules that re-export det-lite's own classes, so ``det.pytorch.PyTorchTrial is
  determined_lite.pytorch.PyTorchTrial``. Workers call it before importing the entrypoint; it
  does nothing when a real ``determined`` is importable: a real installation always wins.
  In other processes, ``_determined_lite_alias.AliasFinder`` (registered at interpreter start
  by the ``determined_lite_alias.pth`` the install puts in site-packages) calls it on
  ``import determined`` when no other finder found one.
- :func:`import_from_path` (Determined's ``det.import_from_path``): import a checkpoint's code
  from its own directory, leaving ``sys.path`` and ``sys.modules`` as they were.
- :func:`determined_notice` is the line ``det-lite experiment create`` prints when the trial
  code imports ``determined``: which one the workers will import.
"""

from determined_lite.compat._detect import determined_notice, find_real_determined, imports_determined
from determined_lite.compat._import_path import import_from_path
from determined_lite.compat._install import ALIAS_PATH, alias_installed, install_alias

__all__ = [
    "ALIAS_PATH",
    "alias_installed",
    "determined_notice",
    "find_real_determined",
    "import_from_path",
    "imports_determined",
    "install_alias",
]
