"""Hyperparameter searchers: ``single``, ``grid``, ``random`` and ``adaptive_asha``, as plug-ins.

Each searcher is one module's :class:`SearchMethod` with its ``searcher`` section's model beside
it; ``_registry.SEARCHERS`` lists them, and the config validation here is built from that list:
:func:`validate_config` / :func:`load_config` (a whole experiment config) and
:func:`validate_searcher` (a ``searcher`` section alone).

Searchers are pure, deterministic state machines (no I/O, no torch). The runner:

1. builds one with :func:`make_searcher` (the ``SearcherSettings`` of the validated config, or
   a ``searcher`` section it validates, the normalised ``hyperparameters`` and the experiment
   seed);
2. executes ``initial_operations()``, then reports each event and executes what it returns:
   ``on_validation_completed(request_id, metric, length)`` after a trial reached the length of
   its ``ValidateAfter``, ``on_trial_exited_early(request_id, reason)`` when a trial stopped on
   its own (``"invalid_hp"``, ``"errored"``, ``"user_canceled"``);
3. stops at ``Shutdown`` (emitted exactly once, when every trial is closed or has exited).

Operations of one trial run in the order emitted. A trial with nothing left to do after a
validation waits (holding no slot) for a later ``ValidateAfter`` (ASHA promotion: resume from its
checkpoint and train only the difference) or ``Close``. Many ``Create`` may come at once: the
runner queues them behind ``max_concurrent_trials`` and the slots. ``state_dict()`` (JSON-able)
saved with the not-yet-executed operations lets a paused or killed experiment resume the search
exactly: rebuild with :func:`make_searcher`, ``load_state_dict()``, and carry on.
"""

from __future__ import annotations

import numbers
from typing import Any, List, Mapping, Optional, Union

from determined_lite.config import SearcherSettings
from determined_lite.searcher import _hparams
from determined_lite.searcher._asha import (
    AdaptiveASHAConfig,
    AdaptiveASHASearch,
    AshaSettings,
    BracketPlan,
    plan_brackets,
)
from determined_lite.searcher._base import Rung, RungReport, SearchMethod
from determined_lite.searcher._hparams import grid as grid_points
from determined_lite.searcher._hparams import sample as sample_hparams
from determined_lite.searcher._ops import (
    ERRORED,
    EXIT_REASONS,
    INVALID_HP,
    USER_CANCELED,
    Close,
    Create,
    ExitReason,
    Operation,
    Shutdown,
    ValidateAfter,
    op_from_dict,
    op_to_dict,
)
from determined_lite.searcher._registry import (
    SEARCHERS,
    load_config,
    searcher_class,
    validate_config,
    validate_searcher,
)
from determined_lite.searcher._simple import (
    GridConfig,
    GridSearch,
    RandomConfig,
    RandomSearch,
    SingleConfig,
    SingleSearch,
)


def make_searcher(
    searcher: Union[SearcherSettings, Mapping[str, Any]], hyperparameters: Mapping[str, Any], seed: int
) -> SearchMethod:
    """The searcher for ``searcher`` settings, hyperparameter space and seed.

    ``searcher``: ``ExperimentConfig.searcher_settings()``, or a ``searcher`` config section,
    validated here (``validate_searcher``: a ``ConfigError`` naming the field).
    """
    settings = searcher if isinstance(searcher, SearcherSettings) else validate_searcher(searcher)
    if hyperparameters is None:
        hyperparameters = {}
    search = searcher_class(settings.name)
    _hparams.check_space(hyperparameters, counted_by=search.name if search.config.needs_count else None)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"reproducibility.experiment_seed: expected an integer, got {seed!r}")
    return search(settings, hyperparameters, int(seed))


def saved_rungs(state: Mapping[str, Any], smaller_is_better: bool) -> Optional[List[Rung]]:
    """The rungs of a saved searcher state (``{"searcher": name, ...}``), asked of the searcher
    that saved it; None when it has none. KeyError: a name not registered."""
    return searcher_class(state["searcher"]).saved_rungs(state, smaller_is_better)


__all__ = [
    "AdaptiveASHAConfig",
    "AdaptiveASHASearch",
    "AshaSettings",
    "BracketPlan",
    "Close",
    "Create",
    "ERRORED",
    "EXIT_REASONS",
    "ExitReason",
    "GridConfig",
    "GridSearch",
    "INVALID_HP",
    "Operation",
    "RandomConfig",
    "RandomSearch",
    "Rung",
    "RungReport",
    "SEARCHERS",
    "SearchMethod",
    "SearcherSettings",
    "Shutdown",
    "SingleConfig",
    "SingleSearch",
    "USER_CANCELED",
    "ValidateAfter",
    "grid_points",
    "load_config",
    "make_searcher",
    "op_from_dict",
    "op_to_dict",
    "plan_brackets",
    "sample_hparams",
    "saved_rungs",
    "searcher_class",
    "validate_config",
    "validate_searcher",
]
