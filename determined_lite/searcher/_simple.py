"""single, grid and random: every trial trains once to max_length, validates, and is closed.

All trials are created up front (the runner queues them behind ``max_concurrent_trials`` and the
slots), so which hyperparameters a trial gets does not depend on completion order.

Trials that exit early, as Determined's searchers treat them:
  * random: an ``invalid_hp`` trial does not count; a new trial with fresh random hyperparameters
    replaces it. ``errored`` / ``user_canceled`` trials count as done, no replacement.
  * grid and single: nothing is replaced (grid points are fixed; single has one configuration).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Dict, List, Literal, Mapping, Optional

from determined_lite.config import (
    DEFAULT_MAX_CONCURRENT_TRIALS,
    NonNegativeInt,
    SearcherSection,
    SearcherSettings,
)
from determined_lite.searcher import _hparams
from determined_lite.searcher._base import BudgetSection, SearchMethod
from determined_lite.searcher._ops import Close, ExitReason, Operation, ValidateAfter

_RUNNING, _COMPLETED, _EXITED, _INVALID = "running", "completed", "exited", "invalid"


class _OneShotSearch(SearchMethod):
    """Shared logic: create the initial points, close each trial at max_length."""

    replaces_invalid = False

    def __init__(self, settings: SearcherSettings, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(settings, space, seed)
        self._status: Dict[str, str] = {}

    def _initial_points(self) -> List[Optional[Dict[str, Any]]]:
        """Hyperparameters of the initial trials (None: sample at random)."""
        raise NotImplementedError

    def _create(self, hparams: Optional[Dict[str, Any]]) -> List[Operation]:
        create = self.factory.create(hparams)
        self._status[create.request_id] = _RUNNING
        return [create, ValidateAfter(create.request_id, self.max_length)]

    def _done(self) -> bool:
        return all(s != _RUNNING for s in self._status.values())

    def _running(self, request_id: str) -> None:
        status = self._status.get(request_id)
        if status is None:
            raise KeyError(f"{self.name} searcher: unknown trial request id {request_id!r}")
        if status != _RUNNING:
            raise RuntimeError(f"{self.name} searcher: trial {request_id!r} is already {status}")

    def initial_operations(self) -> List[Operation]:
        self._start()
        ops: List[Operation] = []
        for hparams in self._initial_points():
            ops += self._create(hparams)
        return self._shutdown_if_done(ops, self._done())

    def on_validation_completed(self, request_id: str, metric: float, length: int) -> List[Operation]:
        self._check_event()
        self._running(request_id)
        if length < self.max_length:
            return []
        self._status[request_id] = _COMPLETED
        return self._shutdown_if_done([Close(request_id)], self._done())

    def on_trial_exited_early(self, request_id: str, reason: str) -> List[Operation]:
        self._check_event(reason)
        self._running(request_id)
        ops: List[Operation] = []
        if reason == ExitReason.INVALID_HP and self.replaces_invalid:
            self._status[request_id] = _INVALID
            ops += self._create(None)
        else:
            self._status[request_id] = _EXITED
        return self._shutdown_if_done(ops, self._done())

    def progress(self) -> float:
        if self._shutdown:
            return 1.0
        done = sum(s in (_COMPLETED, _EXITED) for s in self._status.values())
        total = self.total_trials or 1
        return min(1.0, done / total)

    def _search_state(self) -> Dict[str, Any]:
        return {"status": dict(self._status)}

    def _load_search_state(self, state: Mapping[str, Any]) -> None:
        self._status = dict(state["status"])


class SingleConfig(SearcherSection):
    """``searcher`` of ``name: single``: the common fields only."""

    name: Literal["single"]


class SingleSearch(_OneShotSearch):
    """One trial with one sample of the space (consts as given, ranges drawn once), to max_length."""

    config = SingleConfig

    @property
    def total_trials(self) -> int:
        return 1

    def _initial_points(self) -> List[Optional[Dict[str, Any]]]:
        return [None]

    def _plan(self) -> Dict[str, Any]:
        return {"max_length": self.max_length}


class RandomConfig(BudgetSection):
    """``searcher`` of ``name: random``."""

    name: Literal["random"]
    max_concurrent_trials: NonNegativeInt = DEFAULT_MAX_CONCURRENT_TRIALS


class RandomSearch(_OneShotSearch):
    """``max_trials`` trials with independent uniform samples; invalid_hp trials are replaced."""

    config = RandomConfig
    replaces_invalid = True

    @property
    def total_trials(self) -> int:
        return int(self.settings.max_trials or 0)

    def _initial_points(self) -> List[Optional[Dict[str, Any]]]:
        return [None] * self.total_trials

    def _plan(self) -> Dict[str, Any]:
        return {"max_length": self.max_length, "max_trials": self.total_trials}


class GridConfig(SearcherSection):
    """``searcher`` of ``name: grid``: every int, double and log hyperparameter needs ``count``."""

    needs_count: ClassVar[bool] = True

    name: Literal["grid"]
    max_concurrent_trials: NonNegativeInt = DEFAULT_MAX_CONCURRENT_TRIALS


class GridSearch(_OneShotSearch):
    """One trial per point of the cartesian product of the hyperparameter axes."""

    config = GridConfig

    def __init__(self, settings: SearcherSettings, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(settings, space, seed)
        self.points = _hparams.grid(space)

    @property
    def total_trials(self) -> int:
        return len(self.points)

    def _initial_points(self) -> List[Optional[Dict[str, Any]]]:
        points: List[Optional[Dict[str, Any]]] = list(copy.deepcopy(self.points))
        return points

    def _plan(self) -> Dict[str, Any]:
        return {"max_length": self.max_length, "grid_points": len(self.points)}
