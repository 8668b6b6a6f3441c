"""Shared test setup: every test gets its own storage root under tmp_path."""

import pytest


@pytest.fixture(autouse=True)
def _det_lite_home(tmp_path, monkeypatch):
    """Point $DET_LITE_HOME at the test's tmp_path so nothing is written to ~/.det-lite."""
    home = tmp_path / "det-lite-home"
    monkeypatch.setenv("DET_LITE_HOME", str(home))
    return home
