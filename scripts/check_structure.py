"""The package's structural limits, checked in CI (issue 25).

    python3 scripts/check_structure.py

- no import circle of any kind between det-lite's modules: imports inside functions and under
  ``if TYPE_CHECKING:`` count (grimp reads every import statement);
- no function longer than 60 lines (decorators and docstring included);
- no module longer than 500 lines;
- no module reaches into another's private names (``private_accesses``). A private name is one
  with a leading underscore that is not a dunder. In module M, ``x._name`` is a violation when
  ``_name`` is defined by another det-lite module and not by M itself (defined: a module-level
  or class-body name, a function or class, or an attribute assigned as ``self._name`` /
  ``cls._name``), unless ``x`` is ``self`` or ``cls`` (a class's own members, its bases'
  included). ``from det_lite_module import _name`` is a violation unless ``_name`` is a
  submodule (det-lite's modules are private files of public packages). Not violations:
  names det-lite does not define (a library's, as ``os._exit`` or ``torch._C``) and
  namedtuple's public API (``_replace``, ``_asdict``, ``_fields``, ``_make``,
  ``_field_defaults``). Use a public accessor or a public constructor instead.

The layer order itself is import-linter's contract in pyproject.toml (``lint-imports``).
Exit 1 with one line per violation; nothing printed but a summary when all hold.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import grimp

PACKAGE = "determined_lite"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def import_circles(graph: grimp.ImportGraph) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges: Dict[str, List[str]] = {
        m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i != m) for m in modules
    }
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    circles: List[List[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def length_violations(root: Path) -> List[str]:
    """Functions over MAX_FUNCTION_LINES and modules over MAX_MODULE_LINES lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path}: module of {lines} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(
                        f"{path}:{start}: function {node.name} of {length} lines "
                        f"(limit {MAX_FUNCTION_LINES})"
                    )
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> Set[str]:
    """The private names a module defines (see the module's docstring)."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _own(node):
            names.add(node.attr)
    return {n for n in names if _private(n)}


def _own(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _imported(path: Path, root: Path, node: ast.ImportFrom) -> Iterator[Tuple[str, Path]]:
    """The names ``node`` imports from a det-lite module, with the directory its submodules
    would be in."""
    if node.level:  # relative: from the module's own package up
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        parts = node.module.split(".") if node.module else []
    elif node.module and node.module.split(".")[0] == root.name:
        base, parts = root.parent, node.module.split(".")
    else:
        return
    for alias in node.names:
        yield alias.name, base.joinpath(*parts)


def private_accesses(root: Path) -> List[str]:
    """Reaches into another det-lite module's private names (see the module's docstring)."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(root.rglob("*.py"))}
    defined = {path: _defined(tree) for path, tree in trees.items()}
    found: List[Tuple[Path, int, str]] = []
    for path, tree in trees.items():
        others = set().union(*(names for p, names in defined.items() if p != path)) - defined[path]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in others and not _own(node):
                if node.attr not in NAMEDTUPLE_API:
                    found.append((path, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.ImportFrom):
                for name, package in _imported(path, root, node):
                    submodule = (package / f"{name}.py").exists() or (package / name).is_dir()
                    if _private(name) and not submodule:
                        what = f"from {'.' * node.level}{node.module or ''} import {name}"
                        found.append((path, node.lineno, what))
    return [f"{p}:{line}: private name of another module: {what}" for p, line, what in sorted(found)]


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    problems = [f"import circle: {' <-> '.join(c)}" for c in import_circles(graph)]
    problems += length_violations(repo / PACKAGE)
    problems += private_accesses(repo / PACKAGE)
    for line in problems:
        print(line)
    print(f"check_structure: {len(graph.modules)} modules, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
