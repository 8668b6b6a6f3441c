"""docs/design.md's sketches stay true: the ``Executor`` sketch (its classes, their members and
parameters) is ``launch/_executor.py``'s, and "Habits checked in CI" names every check
``.ci/run`` runs, in its order, and its test command is the README's (as
tests/pytorch/test_callback_hooks.py checks the hook table)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Dict, List

from determined_lite.launch import _executor

REPO = Path(__file__).resolve().parents[1]
DESIGN = (REPO / "docs" / "design.md").read_text()


def _sketch() -> Dict[str, Dict[str, List[str]]]:
    """The Executor sketch's classes: each member (a method's parameters, self/cls left out and
    defaults as ``name=``; an attribute's ``[]``)."""
    block = re.search(r"```python\n(class Executor\(abc\.ABC\):.*?)```", DESIGN, re.S)
    assert block is not None, "design.md has no Executor sketch"
    classes: Dict[str, Dict[str, List[str]]] = {}
    members: Dict[str, List[str]] = {}
    for line in block.group(1).splitlines():
        code = line.split("#")[0].rstrip()
        if m := re.match(r"class (\w+)", code):
            members = classes.setdefault(m.group(1), {})
        elif m := re.match(r" {4}def (\w+)\((.*)\)", code):
            params = [p.strip() for p in m.group(2).split(",")]
            members[m.group(1)] = [p.split("=")[0] + ("=" if "=" in p else "") for p in params[1:]]
        elif m := re.match(r" {4}(\w+): ", code):
            for name in re.findall(r"(\w+): [^;]+", code):
                members[name] = []
    return classes


def _params(function: object) -> List[str]:
    found: List[str] = []
    for p in list(inspect.signature(function).parameters.values())[1:]:  # type: ignore[arg-type]
        if p.kind == p.KEYWORD_ONLY and "*" not in found:
            found.append("*")
        found.append(p.name + ("=" if p.default is not p.empty else ""))
    return found


def _code(cls: type) -> Dict[str, List[str]]:
    """A class's public members as the sketch writes them (``__init__`` included)."""
    if dataclasses.is_dataclass(cls):
        return {f.name: [] for f in dataclasses.fields(cls)}
    members = {name: [] for name in cls.__annotations__}
    for name, value in vars(cls).items():
        function = value.__func__ if isinstance(value, classmethod) else value
        if inspect.isfunction(function) and (not name.startswith("_") or name == "__init__"):
            members[name] = _params(function)
    return members


def test_the_executor_sketch_is_the_code():
    sketch = _sketch()
    assert list(sketch) == ["Executor", "TrialRun", "Placement"]
    for name, members in sketch.items():
        assert members == _code(getattr(_executor, name)), name


def _ci_steps() -> List[str]:
    """What .ci/run runs after its installs, in order (``python3 -m `` left out)."""
    steps = []
    for line in (REPO / ".ci" / "run").read_text().splitlines():
        if line.startswith(("#", "set ", "cd ")) or not line.strip():
            continue
        for command in line.split("&&"):
            command = command.strip()
            if "pip install" not in command and not command.startswith("bash "):
                steps.append(command.removeprefix("python3 -m ").removeprefix("python3 "))
    return steps


def test_the_ci_steps_design_md_names_are_ci_runs():
    habits = DESIGN.split("## Habits checked in CI\n", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`([^`]+)`", habits)
    steps = _ci_steps()
    assert steps == ["ruff check .", "mypy", "lint-imports", "scripts/check_structure.py", "pytest -n 3"]
    assert [n for n in named if n in steps] == steps[:-1]  # the last: "the README's test command"
    assert "the README's\ntest command" in habits or "the README's test command" in habits
    test_command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert test_command in (REPO / "README.md").read_text().splitlines()
