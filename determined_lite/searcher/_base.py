"""SearchMethod: the event-driven interface every searcher implements, plus shared bookkeeping.

A searcher is a pure, deterministic state machine: the runner calls ``initial_operations()``
once, then reports events (a validation at the requested length, or a trial that exited early)
and executes the operations each call returns. Same config, seed and event sequence → same
operations. ``state_dict()`` after any event and ``load_state_dict()`` into a fresh searcher built
from the same config continue the search exactly (the runner keeps the operations it had not
executed yet; ``initial_operations()`` is not called again).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import random
import sys
import typing
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Type

from pydantic import model_validator

from determined_lite.config import FieldError, PositiveInt, SearcherSection, SearcherSettings
from determined_lite.searcher import _hparams
from determined_lite.searcher._ops import EXIT_REASONS, Create, Operation, Shutdown

STATE_VERSION = 1

# The metric a trial that exited early stands for (worse than any real value), as in Determined.
WORST_METRIC = sys.float_info.max


def oriented(metric: float, smaller_is_better: bool) -> float:
    """``metric`` turned so that smaller is better; NaN (and +inf) count as the worst value."""
    value = float(metric)
    if not smaller_is_better:
        value = -value
    if math.isnan(value):
        return WORST_METRIC
    return max(-WORST_METRIC, min(WORST_METRIC, value))


class TrialFactory:
    """Names new trials (``r0``, ``r1``, … in creation order) and samples their hyperparameters
    from one ``random.Random(seed)``, so the whole search is reproducible from the seed."""

    def __init__(self, space: Mapping[str, Any], seed: int) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.created = 0

    def create(self, hparams: Optional[Dict[str, Any]] = None) -> Create:
        """A Create for a new trial: ``hparams`` if given, else a fresh random sample."""
        if hparams is None:
            hparams = _hparams.sample(self.space, self.rng)
        op = Create(request_id=f"r{self.created}", hparams=hparams)
        self.created += 1
        return op

    def state_dict(self) -> Dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"created": self.created, "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.created = int(state["created"])


class BudgetSection(SearcherSection):
    """A searcher section with ``max_trials``, which it needs (random, adaptive_asha)."""

    max_trials: Optional[PositiveInt] = None

    @model_validator(mode="after")
    def _needs_max_trials(self) -> "BudgetSection":
        if self.max_trials is None:
            raise FieldError(("max_trials",), f"the {self.name!r} searcher needs max_trials (a positive int)")
        return self


@dataclasses.dataclass(frozen=True)
class RungReport:
    """A trial's report at a rung: its metric as reported; ``promoted`` to the next rung;
    ``stopped``: closed there by the searcher (it will not be promoted)."""

    request_id: str
    metric: float
    promoted: bool
    stopped: bool


@dataclasses.dataclass(frozen=True)
class Rung:
    """A rung of a bracket (what the dashboard's rung view shows): its ``length`` and reports."""

    bracket: int
    index: int
    length: int
    reports: List[RungReport]


class SearchMethod(abc.ABC):
    """Base of all searchers: decides which trials run, how long, and when the search ends.

    A searcher class names its ``searcher`` section's model in ``config`` (a
    :class:`SearcherSection` whose ``name`` is a one-value ``Literal``); its ``name`` is that value.
    """

    config: ClassVar[Type[SearcherSection]]
    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config" in cls.__dict__:
            (cls.name,) = typing.get_args(cls.config.model_fields["name"].annotation)

    def __init__(self, settings: SearcherSettings, space: Mapping[str, Any], seed: int) -> None:
        self.settings = settings
        self.metric = settings.metric  # the validation metric the runner must report
        self.smaller_is_better = settings.smaller_is_better
        self.unit = settings.unit  # of every ValidateAfter.length: batches, records or epochs
        self.max_length = settings.max_length
        self.factory = TrialFactory(space, seed)
        self._started = False
        self._shutdown = False

    # ---- what the runner needs to know -------------------------------------------------------
    @property
    @abc.abstractmethod
    def total_trials(self) -> Optional[int]:
        """Trials the search runs to the end, known up front; trials created to replace
        ``invalid_hp`` ones come on top of this."""

    # ---- events ------------------------------------------------------------------------------
    @abc.abstractmethod
    def initial_operations(self) -> List[Operation]:
        """The first operations (called once per experiment)."""

    @abc.abstractmethod
    def on_validation_completed(self, request_id: str, metric: float, length: int) -> List[Operation]:
        """The trial validated after training ``length`` units in total; ``metric`` is the value
        of ``self.metric``. Reports before the requested length (periodic validations) are
        ignored."""

    @abc.abstractmethod
    def on_trial_exited_early(self, request_id: str, reason: str) -> List[Operation]:
        """The trial stopped for ``reason`` ("invalid_hp", "errored" or "user_canceled"); it
        needs no Close."""

    @abc.abstractmethod
    def progress(self) -> float:
        """Fraction of the search done, 0..1 (1 once Shutdown was emitted)."""

    # ---- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to continue the search exactly; JSON-able."""
        return {
            "searcher": self.name,
            "version": STATE_VERSION,
            "plan": self._plan(),
            "started": self._started,
            "shutdown": self._shutdown,
            "factory": self.factory.state_dict(),
            "search": self._search_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from ``state_dict()`` of a searcher built from the same config."""
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise ValueError(f"searcher state: expected a state_dict() of version {STATE_VERSION}")
        if state.get("searcher") != self.name:
            raise ValueError(
                f"searcher state: saved by the {state.get('searcher')!r} searcher, not {self.name!r}"
            )
        if state.get("plan") != self._plan():
            raise ValueError(
                "searcher state: the searcher config changed since the state was saved "
                f"(saved plan {state.get('plan')!r}, current {self._plan()!r})"
            )
        self.factory.load_state_dict(state["factory"])
        self._started = bool(state["started"])
        self._shutdown = bool(state["shutdown"])
        self._load_search_state(state["search"])

    @classmethod
    def saved_rungs(cls, state: Mapping[str, Any], smaller_is_better: bool) -> Optional[List[Rung]]:
        """The rungs of a saved ``state_dict()`` of this searcher, for the dashboard; None: the
        searcher has no rungs."""
        return None

    @abc.abstractmethod
    def _plan(self) -> Dict[str, Any]:
        """What the config fixes (compared on load to catch a changed config)."""

    @abc.abstractmethod
    def _search_state(self) -> Dict[str, Any]: ...

    @abc.abstractmethod
    def _load_search_state(self, state: Mapping[str, Any]) -> None: ...

    # ---- helpers -----------------------------------------------------------------------------
    def _start(self) -> None:
        if self._started:
            raise RuntimeError(
                "initial_operations() already ran for this search; after load_state_dict() continue "
                "with the operations stored by the runner"
            )
        self._started = True

    def _check_event(self, reason: Optional[str] = None) -> None:
        if not self._started:
            raise RuntimeError("searcher event before initial_operations()")
        if self._shutdown:
            raise RuntimeError("searcher event after Shutdown")
        if reason is not None and reason not in EXIT_REASONS:
            raise ValueError(f"unknown exit reason {reason!r}; expected one of {', '.join(EXIT_REASONS)}")

    def _shutdown_if_done(self, ops: List[Operation], done: bool) -> List[Operation]:
        if done and not self._shutdown:
            self._shutdown = True
            ops.append(Shutdown())
        return ops
