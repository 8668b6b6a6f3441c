"""How a det-lite command ends: the collector frozen before the interpreter's finalization."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# An exit handler registered before the command's own runs after them (reverse order): it sees
# whether the command froze the collector (the final collections of an experiment runner's
# interpreter took ~0.1 s at every command's end; ~15 ms frozen).
PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
from determined_lite.cli import main
main(sys.argv[1:])
"""


def test_a_command_freezes_the_collector_after_its_exit_handlers() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "--version"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("det-lite, version")
    frozen = int(lines[-1].split()[1])
    assert frozen > 10_000, out.stdout  # every object the command's modules made
