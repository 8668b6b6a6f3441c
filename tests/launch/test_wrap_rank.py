"""``python3 -m determined.launch.wrap_rank RANK [--] COMMAND`` (issue 30, item 3), as Determined's
Core API tutorial (step 4) and e2e fixtures call it: every line of COMMAND's stdout and stderr
prefixed by its rank (lines end at \\n or \\r), COMMAND's exit status kept. Before: no module
``determined.launch.wrap_rank``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import pytest

from tests.timing import budget

pytestmark = pytest.mark.slow  # each call starts an interpreter that imports the alias (torch)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALIAS = os.path.join(REPO, "determined_lite", "_alias")
CHILD = (
    "import sys; print('out 1'); print('err', file=sys.stderr); "
    "sys.stdout.write('bar 1\\rbar 2'); sys.exit(4)"
)


def wrap_rank(args: List[str], **env: str) -> subprocess.CompletedProcess:
    full: Dict[str, str] = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, ALIAS]), **env)
    return subprocess.run(
        [sys.executable, "-m", "determined.launch.wrap_rank", *args],
        capture_output=True, text=True, env=full, timeout=budget(60),
    )


def test_each_line_is_prefixed_with_the_rank_and_the_status_kept() -> None:
    proc = wrap_rank(["3", "--", sys.executable, "-c", CHILD])
    assert proc.returncode == 4
    assert proc.stdout.splitlines() == ["[rank 3] out 1", "[rank 3] bar 1", "[rank 3] bar 2"]
    assert proc.stderr.splitlines() == ["[rank 3] err"]


def test_the_rank_from_environment_variables_in_order() -> None:
    proc = wrap_rank(["--no-redirect-stdio", "NO_SUCH_RANK,MY_RANK", "echo", "hi"], MY_RANK="7")
    assert (proc.returncode, proc.stdout) == (0, "[rank 7] hi\n")


def test_no_rank_is_one_line_and_exit_2() -> None:
    proc = wrap_rank(["NO_SUCH_RANK", "echo", "hi"])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "wrap_rank: none of the environment variables 'NO_SUCH_RANK' holds a rank"
