"""The test run never touches the user's own det-lite store (issue 40, item 5).

Imported by ``tests/conftest.py`` before any fixture runs (or loaded with ``-p tests.home_guard``):
it points ``$DET_LITE_HOME`` at a temporary directory of its own for the whole session, so
module- and session-scoped fixtures, which run before the per-test home of ``conftest``, write
there too; and it notes every name, size and modification time under the user's store
(``$DET_LITE_HOME`` as the run found it, else ``~/.det-lite``). At the session's end
:func:`pytest_sessionfinish` compares, and a change fails the run, naming what changed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Tuple

Entry = Tuple[str, int, int]  # kind ("dir", "file", "link"), size, mtime in ns


def snapshot(root: str) -> Dict[str, Entry]:
    """Every path under ``root`` (``root`` itself included, as ".") with its kind, size and mtime;
    empty when ``root`` does not exist. Links are not followed."""
    found: Dict[str, Entry] = {}
    if not os.path.lexists(root):
        return found
    for directory, dirs, files in os.walk(root):
        for name in [os.curdir] if directory == root else []:
            found[name] = _entry(directory)
        for name in dirs + files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = _entry(path)
    return found


def _entry(path: str) -> Entry:
    st = os.lstat(path)
    kind = "link" if os.path.islink(path) else "dir" if os.path.isdir(path) else "file"
    return kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns


def changes(before: Dict[str, Entry], after: Dict[str, Entry]) -> List[str]:
    """What changed from ``before`` to ``after``, one ``path (new|removed|changed)`` each."""
    lines = [f"{p} (new)" for p in sorted(set(after) - set(before))]
    lines += [f"{p} (removed)" for p in sorted(set(before) - set(after))]
    lines += [f"{p} (changed)" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return lines


USER_STORE = os.path.abspath(os.path.expanduser(os.environ.get("DET_LITE_HOME") or "~/.det-lite"))
_BEFORE = snapshot(USER_STORE)
SESSION_HOME = tempfile.mkdtemp(prefix="det-lite-tests-")
os.environ["DET_LITE_HOME"] = os.path.join(SESSION_HOME, "home")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Fail the run when anything under the user's store changed during it."""
    changed = changes(_BEFORE, snapshot(USER_STORE))
    shutil.rmtree(SESSION_HOME, ignore_errors=True)
    if not changed:
        return
    shown = changed[:20] + ([f"... and {len(changed) - 20} more"] if len(changed) > 20 else [])
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"the tests changed the user's det-lite store {USER_STORE}: " + ", ".join(shown)
    if reporter is not None:
        reporter.write_line(f"ERROR: {message}", red=True, bold=True)
    else:
        print(f"ERROR: {message}")
    session.exitstatus = 1
