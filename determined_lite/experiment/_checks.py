"""Checks of an experiment's code before anything is recorded: that its entrypoint and
callback modules exist in the context snapshot (found, never imported or run), and which
``determined`` the trial code would import. Standard library only at import time."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from determined_lite._errors import did_you_mean
from determined_lite.store._paths import list_names


def check_entrypoint(entrypoint: str, context_dir: str) -> Optional[str]:
    """Why ``module:Class`` or a script cannot be found in ``context_dir`` (None when it can),
    without running it."""
    from determined_lite.config._launcher import script_command

    script = script_command(entrypoint)
    if script is not None:
        return _check_script(script, entrypoint, context_dir)
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        return f"entrypoint: expected 'module:Class', got {entrypoint!r}"
    spec = _find_module(module_name, [context_dir] + sys.path)
    if spec is None:
        hint = did_you_mean(module_name, _module_names(context_dir))
        where = f"in context directory {context_dir}{hint}"
        return f"entrypoint {entrypoint!r}: no module {module_name!r} {where}"
    origin = spec.origin
    if origin and origin.endswith(".py") and "." not in attr:
        try:
            with open(origin) as f:
                tree = ast.parse(f.read(), filename=origin)
        except (OSError, SyntaxError) as e:
            return f"entrypoint {entrypoint!r}: cannot read module {module_name!r} ({origin}): {e}"
        if attr not in _top_level_names(tree):
            trials = _trial_classes(tree)
            hint = did_you_mean(attr, trials or [n.name for n in tree.body if isinstance(n, ast.ClassDef)])
            if not hint and trials:
                hint = f" (its trial classes: {', '.join(trials)})"
            return f"entrypoint {entrypoint!r}: module {module_name!r} ({origin}) defines no {attr!r}{hint}"
    return None


def _check_script(script: Any, entrypoint: str, context_dir: str) -> Optional[str]:
    """Why the script of ``entrypoint`` is missing (None when it is there)."""
    if script.module is not None:
        if _find_module(script.module, [context_dir] + sys.path) is None:
            hint = did_you_mean(script.module, _module_names(context_dir))
            where = f"in context directory {context_dir}{hint}"
            return f"entrypoint {entrypoint!r}: no module {script.module!r} {where}"
        return None
    path = str(script.path)
    if os.path.isabs(path) or not os.path.isfile(os.path.join(context_dir, path)):
        scripts = [n for n in list_names(context_dir) if n.endswith(".py")]
        hint = did_you_mean(path, scripts)
        return f"entrypoint {entrypoint!r}: no script {path!r} in context directory {context_dir}{hint}"
    return None


def _module_names(context_dir: str) -> List[str]:
    """Top-level modules and packages of a context directory (for did-you-mean)."""
    entries = list_names(context_dir)
    names = [e[:-3] for e in entries if e.endswith(".py")]
    names += [e for e in entries if os.path.isfile(os.path.join(context_dir, e, "__init__.py"))]
    return sorted(names)


def _trial_classes(tree: ast.Module) -> List[str]:
    """Top-level classes of a module deriving from ``PyTorchTrial`` (by base name, also through
    classes of the same module), in definition order."""
    trials: List[str] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if base_name == "PyTorchTrial" or base_name in trials:
                trials.append(node.name)
                break
    return trials


def check_callback_modules(modules: Sequence[str], context_dir: str) -> Optional[str]:
    """Why a module of ``det_lite.callback_modules`` cannot be found (None when all can), without
    importing it: workers import them from the context directory, then the environment."""
    for i, name in enumerate(modules):
        if _find_module(name, [context_dir] + sys.path) is None:
            hint = f" (a module name, not a file: {name[:-3]!r}?)" if name.endswith(".py") else ""
            return (
                f"det_lite.callback_modules[{i}]: no module {name!r} in context directory {context_dir} "
                f"or the Python environment{hint}"
            )
    return None


def _find_module(name: str, path: List[str]) -> Optional[importlib.machinery.ModuleSpec]:
    """Where ``name`` would be imported from with ``path`` as sys.path, ignoring modules already
    imported in this process (``importlib.util.find_spec`` would return those)."""
    spec: Optional[importlib.machinery.ModuleSpec] = None
    search: Optional[List[str]] = path
    prefix = ""
    for part in name.split("."):
        if search is None:
            return None  # a module, not a package: it has no submodules
        try:
            spec = importlib.machinery.PathFinder.find_spec(prefix + part, search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or []) or None
        prefix += part + "."
    return spec


def print_determined_notice(raw: Dict[str, Any], context_dir: str) -> None:
    """One line on stderr when the trial code imports ``determined``: the alias or a real package."""
    from determined_lite.compat import determined_notice
    from determined_lite.config import environment_variables

    pythonpath = environment_variables(raw).get("PYTHONPATH", "")
    from determined_lite.config._launcher import script_command

    entrypoint = raw["entrypoint"]
    module = None if script_command(entrypoint) is not None else entrypoint.partition(":")[0]
    notice = determined_notice(context_dir, [p for p in pythonpath.split(os.pathsep) if p], module)
    if notice:
        print(f"det-lite: {notice}", file=sys.stderr)


def _top_level_names(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions: accept anything
            names |= _any_names(node)
    return names


def _any_names(node: ast.AST) -> set:
    return {n.name for n in ast.walk(node) if isinstance(n, ast.ClassDef)} | {
        a.asname or a.name
        for n in ast.walk(node)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
