"""Shared test setup: every test gets its own storage root under tmp_path, and trial modules a
test imports from a context or checkpoint directory (``model_def`` ...) do not leak into the next."""

import os
import sys
import sysconfig

import pytest

_INSTALLED = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_OURS = ("determined_lite", "determined", "tests")


@pytest.fixture(autouse=True)
def _det_lite_home(tmp_path, monkeypatch):
    """Point $DET_LITE_HOME at the test's tmp_path so nothing is written to ~/.det-lite."""
    home = tmp_path / "det-lite-home"
    monkeypatch.setenv("DET_LITE_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _forget_trial_modules():
    """Restore ``sys.path`` and forget modules imported from neither the environment nor this
    package (e.g. a checkpoint's ``code/model_def.py`` loaded with trust=True)."""
    path, before = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not file or name.split(".")[0] in _OURS:
            continue
        if not os.path.realpath(file).startswith(_INSTALLED):
            del sys.modules[name]
