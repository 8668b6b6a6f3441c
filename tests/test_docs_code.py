"""The README's and docs' Python code blocks that are complete programs run, and print what the
docs show (issue 29.14).

A block is a complete program when it compiles, has no ``...`` placeholder, uses no name it does
not define or import, and every module it imports is installed (``determined``: det-lite's alias)
or is a file beside it in the working directory (the linear fixture's ``const.yaml`` and
``model_def.py``, copied there). Each runs with ``det-lite run`` (the alias installed, as the
docs say for code outside det-lite's workers). Output the text right after a block shows in
backticks (``batch 50 validation: accuracy=0.9375``) must appear, numbers normalised.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import re
import shutil
import subprocess
import symtable
import sys
import textwrap
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from tests.timing import budget

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FIXTURE = REPO / "tests" / "fixtures" / "experiments" / "linear"
_BLOCK = re.compile(r"^( *)```python\n(.*?)^ *```\n(.*?)(?=\n\n|\Z)", re.S | re.M)
_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


def _blocks() -> Iterator[Tuple[str, str, str]]:
    """(where, code, the paragraph after it) for every python block of the docs."""
    for path in DOCS:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            line = text[: m.start()].count("\n") + 1
            yield f"{path.name}:{line}", textwrap.dedent(m.group(2)), m.group(3)


def _undefined(code: str) -> List[str]:
    """Global names ``code`` uses but never binds (builtins aside)."""
    names: set = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (symbol.is_global() or table.get_type() == "module"):
                if not symbol.is_assigned() and not symbol.is_imported():
                    names.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(symtable.symtable(code, "<doc>", "exec"))
    top = symtable.symtable(code, "<doc>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    return sorted(n for n in names - bound if not hasattr(builtins, n))


def _imports_resolve(code: str) -> bool:
    for m in re.finditer(r"^\s*(?:from +([\w.]+) +import +([\w, ]+)|import +([\w.]+))", code, re.M):
        top = (m.group(1) or m.group(3)).split(".")[0]
        beside = FIXTURE / f"{top}.py"
        if beside.exists():  # a file of the working directory: it must define what is imported
            defined = beside.read_text()
            names = [n.strip() for n in (m.group(2) or "").split(",") if n.strip()]
            if not all(re.search(rf"^(class|def) {n}\b|^{n} =", defined, re.M) for n in names):
                return False
        elif top != "determined" and importlib.util.find_spec(top) is None:
            return False
    return True


def _complete(code: str) -> bool:
    try:
        compile(code, "<doc>", "exec")
    except SyntaxError:
        return False
    return "..." not in code and not _undefined(code) and _imports_resolve(code)


PROGRAMS = [pytest.param(code, after, id=where) for where, code, after in _blocks() if _complete(code)]


def _normal(text: str) -> str:
    return _NUMBER.sub("<n>", text)


def test_the_docs_have_complete_programs_and_fragments():
    ids = [p.id for p in PROGRAMS]
    assert any(i.startswith("README.md") for i in ids), ids
    fragments = [where for where, code, _ in _blocks() if not _complete(code)]
    assert fragments  # e.g. the callbacks snippet uses a `trial` defined elsewhere


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("code, after", PROGRAMS)
def test_doc_program_runs_and_prints_what_the_docs_show(code, after, tmp_path, _det_lite_home):
    work = tmp_path / "work"
    shutil.copytree(FIXTURE, work)
    (work / "program.py").write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(work)]))
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", "run", "program.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=budget(240),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    shown = re.findall(r"`(batch \d+ \w+: [^`]+)`", after)
    printed = [_normal(line) for line in out.splitlines()]
    for line in shown:
        assert any(_normal(line) in p for p in printed), (line, out)
