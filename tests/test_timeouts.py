"""``env_seconds``: the one reader of a number of seconds from an environment variable."""

from __future__ import annotations

import pytest

from determined_lite._timeouts import dist_timeout, env_seconds, seconds_env_problem


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


def test_seconds_env_problem_names_the_first_bad_variable() -> None:
    assert (
        seconds_env_problem({"DET_LITE_STALL_TIMEOUT": "0", "DET_LITE_DIST_TIMEOUT": " 4.5 ", "OTHER": "x"})
        is None
    )
    assert seconds_env_problem({"DET_LITE_SETUP_TIMEOUT": "-2"}, "f.yaml") == (
        "f.yaml: $DET_LITE_SETUP_TIMEOUT must be a number of seconds >= 0, got '-2'"
    )
    assert seconds_env_problem({"DET_LITE_COLLECTIVE_TIMEOUT": "inf"}) is not None


def test_the_join_timeout_is_read_when_asked_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LITE_DIST_TIMEOUT", "12.5")
    assert dist_timeout() == 12.5
    monkeypatch.delenv("DET_LITE_DIST_TIMEOUT")
    assert dist_timeout() == 30.0
