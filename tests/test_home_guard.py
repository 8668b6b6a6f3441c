"""The test run never writes into the user's own det-lite store (issue 40, item 5): before, the
module-scoped fixtures of ``tests/distributed/test_hooks.py`` recorded two ``HookTrial (local)``
experiments in ``~/.det-lite`` (they run before the per-test ``$DET_LITE_HOME``), and nothing
noticed. ``tests/home_guard.py`` gives the session a home of its own and fails the run when the
user's store changed; these tests run pytest with it on a throwaway ``$HOME``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli_helpers import REPO
from tests.timing import budget

LEAK = """
import os

def test_leaks():
    os.makedirs(os.path.expanduser("~/.det-lite"), exist_ok=True)
    with open(os.path.expanduser("~/.det-lite/det-lite.db"), "w") as f:
        f.write("x")
"""

CLEAN = """
import os

def test_writes_its_own_home():
    home = os.environ["DET_LITE_HOME"]
    assert not home.startswith(os.path.expanduser("~"))
    os.makedirs(home)
    with open(os.path.join(home, "det-lite.db"), "w") as f:
        f.write("x")
    print("session home:", home)
"""


def _pytest(tmp_path, source: str) -> subprocess.CompletedProcess:
    """pytest with the suite's conftest (as a plugin) on a test file holding ``source``, with
    ``$HOME`` in ``tmp_path`` and no ``$DET_LITE_HOME``: the user's store is ``tmp_path/home/.det-lite``."""
    (tmp_path / "test_case.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "DET_LITE_HOME"}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=REPO)
    os.makedirs(tmp_path / "home")
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-s", "-q"]
    return subprocess.run(
        [*argv, "test_case.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=budget(120)
    )


def test_a_run_that_writes_into_the_users_store_fails_naming_what_changed(tmp_path):
    proc = _pytest(tmp_path, LEAK)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    store = tmp_path / "home" / ".det-lite"
    assert "1 passed" in proc.stdout  # the test itself passed: the guard failed the run
    line = f"ERROR: the tests changed the user's det-lite store {store}: . (new), det-lite.db (new)"
    assert line in proc.stdout, proc.stdout


def test_a_run_that_writes_into_its_own_homes_passes(tmp_path):
    proc = _pytest(tmp_path, CLEAN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("session home:")]
    assert line.endswith(os.sep + "det-lite-home")  # the test's own (conftest's autouse fixture)
    assert not os.path.exists(tmp_path / "home" / ".det-lite")


@pytest.fixture(scope="module")
def module_home() -> str:
    """What a module-scoped fixture sees (it runs before conftest's per-test home)."""
    return os.environ.get("DET_LITE_HOME", "")


def test_module_fixtures_get_the_sessions_home_and_tests_their_own(module_home, tmp_path):
    from tests import home_guard  # here: conftest imported it first, before any fixture ran

    assert module_home == os.path.join(home_guard.SESSION_HOME, "home")
    assert not module_home.startswith(home_guard.USER_STORE + os.sep)
    assert os.environ["DET_LITE_HOME"] == str(tmp_path / "det-lite-home")


def test_snapshot_notes_new_removed_and_changed_entries(tmp_path):
    from tests import home_guard

    root = tmp_path / "store"
    assert home_guard.snapshot(str(root)) == {}
    root.mkdir()
    (root / "a").write_text("1")
    (root / "b").write_text("2")
    before = home_guard.snapshot(str(root))
    assert set(before) == {".", "a", "b"} and before["a"][:2] == ("file", 1)
    (root / "a").write_text("10")
    (root / "b").unlink()
    (root / "c").mkdir()
    after = home_guard.snapshot(str(root))
    assert home_guard.changes(before, after) == ["c (new)", "b (removed)", ". (changed)", "a (changed)"]
