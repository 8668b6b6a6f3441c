"""Which ``determined`` a trial's workers will import, and whether trial code imports it at all."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from typing import Iterable, Optional, Sequence

# Bounds on the scan, so a context directory full of data stays quick to check.
# A directory holding a top-level ``determined`` package made of re-exports (see _install).
ALIAS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_alias")


def is_alias_origin(origin: Optional[str]) -> bool:
    """Whether a module file belongs to the alias tree."""
    if not origin:
        return False
    return os.path.abspath(origin).startswith(ALIAS_PATH + os.sep)


_SKIP_DIRS = {"__pycache__", "node_modules", "venv", ".venv", "site-packages"}
_MAX_PY_FILES = 500
_MAX_ENTRIES = 20_000
_MAX_BYTES = 2_000_000


def find_real_determined(extra_paths: Sequence[str] = ()) -> Optional[str]:
    """The file of a real ``determined`` importable from ``extra_paths`` + ``sys.path``, or None.

    A package already imported counts, unless it is det-lite's alias. A directory named
    ``determined`` without ``__init__.py`` (a namespace portion, e.g. a data folder) does not:
    Python prefers any regular package over it.
    """
    module = sys.modules.get("determined")
    if module is not None:
        origin = getattr(module, "__file__", None)
        return None if is_alias_origin(origin) else (origin or repr(module))
    path = [p for p in [*extra_paths, *sys.path] if not _is_alias_dir(p)]
    try:
        spec = importlib.machinery.PathFinder.find_spec("determined", path)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace") or spec.loader is None:
        return None
    return None if is_alias_origin(spec.origin) else spec.origin


def _is_alias_dir(path: str) -> bool:
    return bool(path) and os.path.abspath(path) == ALIAS_PATH


def _python_files(context_dir: str) -> Iterable[str]:
    """The context directory's ``.py`` files (walked top-down), within the scan bounds."""
    seen = found = 0
    for root, dirs, files in os.walk(context_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        seen += len(dirs) + len(files)
        for name in sorted(files):
            if name.endswith(".py"):
                found += 1
                if found > _MAX_PY_FILES:
                    return
                yield os.path.join(root, name)
        if seen > _MAX_ENTRIES:
            return


def _is_determined(module: str) -> bool:
    return module == "determined" or module.startswith("determined.")


def _imports_in(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_is_determined(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and _is_determined(node.module or ""):
            return True
    return False


def imports_determined(context_dir: str) -> bool:
    """Whether a Python file of the context directory imports ``determined`` (absolute imports
    anywhere in the file; files that do not parse are skipped)."""
    for path in _python_files(context_dir):
        try:
            if os.path.getsize(path) > _MAX_BYTES:
                continue
            with open(path, "rb") as f:
                if _imports_in(ast.parse(f.read(), filename=path)):
                    return True
        except (OSError, SyntaxError, ValueError):
            continue
    return False


def determined_notice(context_dir: str, pythonpath: Sequence[str] = ()) -> Optional[str]:
    """One line saying which ``determined`` the trial will import; None if it imports none.

    ``pythonpath``: entries the workers get on top of this process's path (the config's
    ``PYTHONPATH``); the context directory comes first, as in the workers.
    """
    if not imports_determined(context_dir):
        return None
    real = find_real_determined([context_dir, *pythonpath])
    if real is None:
        return (
            "trial code imports 'determined': no Determined installation found, so it gets "
            "det-lite's compatibility alias (determined.pytorch -> determined_lite.pytorch)"
        )
    return (
        f"warning: trial code imports 'determined' and a real Determined is installed at {real}: "
        "the trial gets that package, not det-lite's alias, and det-lite can only run trials built "
        "on its own classes (uninstall determined, or take it off PYTHONPATH, to use the alias)"
    )
