"""Hyperparameter searchers: ``single``, ``grid``, ``random`` and ``adaptive_asha``.

Searchers are pure, deterministic state machines (no I/O, no torch). The runner:

1. builds one with :func:`make_searcher` (the ``SearcherSettings`` of the validated config, or
   a ``searcher`` section the schema validates, the normalised ``hyperparameters`` and the
   experiment seed);
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
from typing import Any, Mapping, Union

from determined_lite.config import SearcherSettings, validate_searcher
from determined_lite.searcher import _hparams
from determined_lite.searcher._asha import AdaptiveASHASearch, BracketPlan, plan_brackets
from determined_lite.searcher._base import SearchMethod
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
from determined_lite.searcher._simple import GridSearch, RandomSearch, SingleSearch

_SEARCHERS = {
    "single": SingleSearch,
    "grid": GridSearch,
    "random": RandomSearch,
    "adaptive_asha": AdaptiveASHASearch,
}


def make_searcher(
    searcher: Union[SearcherSettings, Mapping[str, Any]], hyperparameters: Mapping[str, Any], seed: int
) -> SearchMethod:
    """The searcher for ``searcher`` settings, hyperparameter space and seed.

    ``searcher``: ``ExperimentConfig.searcher_settings()``, or a ``searcher`` config section,
    validated by the schema (``validate_searcher``: a ``ConfigError`` naming the field).
    """
    settings = searcher if isinstance(searcher, SearcherSettings) else validate_searcher(searcher)
    if hyperparameters is None:
        hyperparameters = {}
    _hparams.check_space(hyperparameters, need_count=settings.name == "grid")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"reproducibility.experiment_seed: expected an integer, got {seed!r}")
    return _SEARCHERS[settings.name](settings, hyperparameters, int(seed))


__all__ = [
    "AdaptiveASHASearch",
    "BracketPlan",
    "Close",
    "Create",
    "ERRORED",
    "EXIT_REASONS",
    "ExitReason",
    "GridSearch",
    "INVALID_HP",
    "Operation",
    "RandomSearch",
    "SearchMethod",
    "SearcherSettings",
    "Shutdown",
    "SingleSearch",
    "USER_CANCELED",
    "ValidateAfter",
    "grid_points",
    "make_searcher",
    "op_from_dict",
    "op_to_dict",
    "plan_brackets",
    "sample_hparams",
]
