"""The launcher half of each engine's record (``config._plugins.ENGINES``): its launcher module
(``command(spec, spec_path, hosts)`` -> ``(argv, env)``, ``problem(slots)``), imported when an
engine is used. ``experiment create`` asks :func:`engine_problem` before anything is recorded
(exit 2 with the reason); the engine's launcher asks again."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, List, Optional, Sequence, Tuple

from determined_lite.config._plugins import ENGINES, SINGLE_ENGINE
from determined_lite.launch._failures import worker_command
from determined_lite.runtime._spec import WorkerSpec


def launcher(backend: str) -> ModuleType:
    """The launcher module of ``backend`` (a name in ``ENGINES``)."""
    try:
        return importlib.import_module(ENGINES[backend].launcher_module)
    except KeyError:
        expected = ", ".join(ENGINES)
        raise ValueError(f"unknown distributed backend {backend!r}; expected one of {expected}") from None


def engine_problem(backend: str, slots: int) -> Optional[str]:
    """Why ``slots`` workers of ``backend`` cannot start here, or None when they can.

    One slot runs in a plain process whatever the backend, so only multi-slot runs need the
    engine.
    """
    if slots <= 1:
        return None
    problem: Optional[str] = launcher(backend).problem(slots)
    return problem


def engine_command(
    spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
) -> Tuple[List[str], Dict[str, str]]:
    """``(argv, extra env)`` that starts ``spec``'s workers: one plain worker process for the
    ``single`` backend (one slot, no hosts), else the engine's launcher."""
    if spec.backend == SINGLE_ENGINE or (spec.slots == 1 and not hosts):
        if spec.slots != 1:
            raise ValueError(f"the single-process backend runs 1 slot, got slots={spec.slots}")
        return worker_command(spec_path), {}
    command: Tuple[List[str], Dict[str, str]] = launcher(spec.backend).command(spec, spec_path, hosts)
    return command
