"""Fixtures the distributed tests share (the tiny trial itself: ``_helpers.TINY_HP``)."""

import pytest


@pytest.fixture(scope="module", params=[1, 2], ids=["k1", "k2"])
def k(request: pytest.FixtureRequest) -> int:
    """The aggregation frequency a module's runs use: 1 (every batch) and 2."""
    return int(request.param)
