"""A collective that times out says so (issue 28.8).

A torch collective timeout blamed rank 0 and never said "timeout": rank 0 only waited for a
rank that hung. The trial's error now says it was a timeout, after how long, and that which
rank did not arrive is unknown (gloo does not say), and that the rank named is not the cause.
"""

from __future__ import annotations

import pytest

from tests.distributed._helpers import SLOTS, TINY_HP, run
from tests.distributed.test_training import LINEAR, exp_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_collective_timeout_says_timeout_and_does_not_blame_the_waiting_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("DET_LITE_COLLECTIVE_TIMEOUT", "3")
    hp = {**TINY_HP, "val_size": 11, "val_batch_size": 2, "fail_batch": 2, "fail_rank": 1}
    hp.update(fail_how="hang", hang_s=40)
    r = run("torch", SLOTS, LINEAR, hp, exp_conf(1), 8, tmp_path, timeout=120)
    assert r.code != 0 and r.result.status == "error", r.lines
    error = r.result.error or ""
    assert "timeout" in error, error
    assert "$DET_LITE_COLLECTIVE_TIMEOUT (3 s)" in error, error
    assert "which one is unknown" in error and "not rank 0" in error, error
