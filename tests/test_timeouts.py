"""``env_seconds``: the one reader of a number of seconds from an environment variable."""

from __future__ import annotations

import pytest

from determined_lite._timeouts import env_seconds


def test_env_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_LITE_X", raising=False)
    assert env_seconds("DET_LITE_X", 7.5) == 7.5
    monkeypatch.setenv("DET_LITE_X", " 2 ")
    assert env_seconds("DET_LITE_X", 7.5) == 2.0
    monkeypatch.setenv("DET_LITE_X", "0")
    assert env_seconds("DET_LITE_X", 7.5) == 0.0
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("DET_LITE_X", bad)
        with pytest.raises(ValueError, match=rf"\$DET_LITE_X must be a number of seconds >= 0, got '{bad}'"):
            env_seconds("DET_LITE_X", 7.5)
