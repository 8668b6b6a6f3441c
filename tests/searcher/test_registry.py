"""The searcher registry is the one list of searchers: names, the config union and the error
messages all derive from it."""

from __future__ import annotations

import pytest

from determined_lite.config import ConfigError, SearcherSection, SearcherSettings
from determined_lite.searcher import SEARCHERS, make_searcher, searcher_class, validate_searcher


def section(name: str) -> dict:
    raw = {"name": name, "metric": "loss", "max_length": {"batches": 4}}
    if "max_trials" in searcher_class(name).config.model_fields:
        raw["max_trials"] = 2
    return raw


def test_every_registered_searcher_validates_and_builds():
    names = [s.name for s in SEARCHERS]
    assert names == ["single", "grid", "random", "adaptive_asha"]
    for search in SEARCHERS:
        assert issubclass(search.config, SearcherSection)
        assert searcher_class(search.name) is search
        settings = validate_searcher(section(search.name))
        assert isinstance(settings, SearcherSettings) and settings.name == search.name
        space = {"x": {"type": "int", "minval": 0, "maxval": 3, "count": 2}}
        assert type(make_searcher(settings, space, 0)) is search


def test_name_errors_list_the_registry():
    listed = "'single', 'grid', 'random' or 'adaptive_asha'"
    with pytest.raises(ConfigError, match=f"^<config>: searcher.name: expected {listed}, got 'bayesian'$"):
        validate_searcher({"name": "bayesian", "metric": "loss"})
    missing = "^<config>: searcher.name: missing required field: one of 'single'"
    with pytest.raises(ConfigError, match=missing):
        validate_searcher({"metric": "loss"})
