"""Which ``determined`` a trial's workers will import, and whether trial code imports it at all."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

# Bounds on the scan, so a context directory full of data stays quick to check.
# A directory holding a top-level ``determined`` package made of re-exports (see _install):
# ``determined_lite/_alias``, found by path (compat never imports the layers the alias re-exports).
ALIAS_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_alias")


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

    A package already imported counts, unless it is det-lite's alias (then the paths are still
    searched: a trial's processes may find a real one there). A directory named
    ``determined`` without ``__init__.py`` (a namespace portion, e.g. a data folder) does not:
    Python prefers any regular package over it.
    """
    module = sys.modules.get("determined")
    if module is not None:
        origin = getattr(module, "__file__", None)
        if not is_alias_origin(origin):
            return origin or repr(module)
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


def _imported_names(tree: ast.AST, package: str) -> Tuple[bool, List[str]]:
    """(whether ``tree`` imports ``determined``, the other modules it imports, as dotted names;
    relative imports resolved against ``package``; ``from a import b`` gives ``a`` and ``a.b``)."""
    found: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_determined(alias.name):
                    return True, []
                found.append(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if not node.level and _is_determined(node.module or ""):
                return True, []
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, base] if base else parts)
            if base:
                found.append(base)
            found.extend(f"{base}.{a.name}" if base else a.name for a in node.names)
    return False, found


def _module_file(context_dir: str, name: str) -> Optional[str]:
    """The context directory's file for module ``name`` (``a/b.py`` or ``a/b/__init__.py``)."""
    base = os.path.join(context_dir, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _parse(path: str) -> Optional[ast.AST]:
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return None
        with open(path, "rb") as f:
            return ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def imports_determined(context_dir: str, module: Optional[str] = None) -> bool:
    """Whether trial code imports ``determined`` (absolute imports anywhere in a file; files that
    do not parse are skipped).

    With ``module`` (the entrypoint's module), only that module and the context directory's
    modules it imports, transitively, count: other files there (tests, fixtures, notebooks'
    helpers) are not the trial's code. Without it, every Python file of the directory counts.
    """
    if module is None:
        for file in _python_files(context_dir):
            tree = _parse(file)
            if tree is not None and _imported_names(tree, "")[0]:
                return True
        return False
    queue, seen = [module], set()  # type: List[str], set[str]
    while queue and len(seen) < _MAX_PY_FILES:
        name = queue.pop()
        found = _module_file(context_dir, name)
        if name in seen or found is None:
            continue
        path = found
        seen.add(name)
        tree = _parse(path)
        if tree is None:
            continue
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        imports, names = _imported_names(tree, package)
        if imports:
            return True
        for dotted in names:  # a.b.c imports a and a.b too
            parts = dotted.split(".")
            queue.extend(".".join(parts[: i + 1]) for i in range(len(parts)))
    return False


def determined_notice(
    context_dir: str, pythonpath: Sequence[str] = (), module: Optional[str] = None
) -> Optional[str]:
    """One line saying which ``determined`` the trial will import; None if it imports none.

    ``pythonpath``: entries the workers get on top of this process's path (the config's
    ``PYTHONPATH``); the context directory comes first, as in the workers. ``module``: the
    entrypoint's module (see :func:`imports_determined`).
    """
    if not imports_determined(context_dir, module):
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
