"""adaptive_asha owns its settings (``divisor``, ``max_rungs``, ``mode`` and their defaults) and
tells the dashboard its rungs; ``SearcherSettings`` carries only what every searcher has."""

from __future__ import annotations

import dataclasses

import pytest

import determined_lite.config as config
from determined_lite.config import SearcherSettings
from determined_lite.searcher import (
    AshaSettings,
    Create,
    Rung,
    RungReport,
    make_searcher,
    saved_rungs,
    validate_searcher,
)

ASHA = {"name": "adaptive_asha", "metric": "acc", "max_trials": 4, "max_length": {"batches": 8}}


def test_searcher_settings_carry_only_the_common_fields():
    names = {f.name for f in dataclasses.fields(SearcherSettings)}
    assert names == {
        "name",
        "metric",
        "smaller_is_better",
        "unit",
        "max_length",
        "max_trials",
        "max_concurrent_trials",
        "time_metric",
        "section",
    }
    assert not any(hasattr(config, n) for n in ("DEFAULT_DIVISOR", "DEFAULT_MAX_RUNGS", "DEFAULT_MODE"))


def test_asha_settings_and_their_defaults():
    # Determined's defaults, for a section that leaves them out (a validated one, or a stored one).
    assert AshaSettings.from_section(validate_searcher(ASHA).section) == AshaSettings(4.0, 5, "standard")
    assert AshaSettings.from_section({}) == AshaSettings(4.0, 5, "standard")
    given = validate_searcher(dict(ASHA, divisor=3, max_rungs=2, mode="aggressive")).section
    assert AshaSettings.from_section(given) == AshaSettings(3.0, 2, "aggressive")


def test_rungs_are_the_searchers_to_tell():
    searcher = make_searcher(
        dict(ASHA, smaller_is_better=False, divisor=2, max_rungs=2, mode="aggressive"),
        {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
        0,
    )
    first, second = [op.request_id for op in searcher.initial_operations() if isinstance(op, Create)][:2]
    searcher.on_validation_completed(first, 0.5, 4)
    searcher.on_validation_completed(second, 0.9, 4)  # larger is better: ranks first, promoted
    state = searcher.state_dict()
    assert saved_rungs(state, smaller_is_better=False) == [
        Rung(
            bracket=0,
            index=0,
            length=4,
            reports=[RungReport(second, 0.9, True, False), RungReport(first, 0.5, False, False)],
        ),
        Rung(bracket=0, index=1, length=8, reports=[]),
    ]
    grid = make_searcher({"name": "grid", "metric": "m", "max_length": {"batches": 1}}, {}, 0)
    grid.initial_operations()
    assert saved_rungs(grid.state_dict(), smaller_is_better=True) is None
    with pytest.raises(KeyError):
        saved_rungs({"searcher": "nonsense"}, smaller_is_better=True)
