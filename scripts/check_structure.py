"""The package's structural limits, checked in CI (issue 25).

    python3 scripts/check_structure.py

- no import circle of any kind between det-lite's modules: imports inside functions and under
  ``if TYPE_CHECKING:`` count (grimp reads every import statement);
- no function longer than 60 lines (decorators and docstring included);
- no module longer than 500 lines.

The layer order itself is import-linter's contract in pyproject.toml (``lint-imports``).
Exit 1 with one line per violation; nothing printed but a summary when all hold.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, List, Set

import grimp

PACKAGE = "determined_lite"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500


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


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    problems = [f"import circle: {' <-> '.join(c)}" for c in import_circles(graph)]
    problems += length_violations(repo / PACKAGE)
    for line in problems:
        print(line)
    print(f"check_structure: {len(graph.modules)} modules, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
