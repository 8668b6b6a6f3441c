"""What one ``Trainer.fit`` runs: :class:`FitPlan`, written once.

Its fields are ``Trainer.fit``'s parameters: Determined's nine, in their order and with their
defaults, then det-lite's keyword-only ones. ``Trainer.fit`` takes them through
:func:`plan_parameters` (its signature is this class's constructor), so the three callers build
the same object: plain Python through ``fit``, an experiment worker directly
(``launch/worker.py``), a script that det-lite runs through ``fit`` and its ``ScriptTrial``
(``launch/_script.py``); ``Trainer.run`` runs it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Concatenate, Dict, Optional, ParamSpec, Sequence, Tuple, TypeVar, Union

from determined_lite.config import DEFAULT_REPORTING_PERIOD, CheckpointPolicy, TrainUnit
from determined_lite.pytorch._callback import Callbacks, PyTorchCallback


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """One ``fit``: how long to train, when to report, validate and checkpoint, what to start
    from, and det-lite's wiring (the bar, the store record, stop requests, callbacks)."""

    checkpoint_period: Optional[TrainUnit] = None
    validation_period: Optional[TrainUnit] = None
    max_length: Optional[TrainUnit] = None
    reporting_period: TrainUnit = DEFAULT_REPORTING_PERIOD
    checkpoint_policy: Union[str, CheckpointPolicy, None] = None  # "best" with a searcher metric, else "all"
    latest_checkpoint: Optional[str] = None
    step_zero_validation: bool = False
    test_mode: bool = False
    profiling_enabled: bool = False  # det-lite: the Profiler callback, as the config's `profiling`
    _: dataclasses.KW_ONLY
    progress: Optional[bool] = None
    record: Optional[bool] = None
    should_stop: Optional[Callable[[], bool]] = None
    # Asked on the chief once training reached max_length (not stopped), with the searcher
    # metric there: a longer max_length trains on in this process (an experiment's ASHA
    # promotion, launch/_fit.py), None ends the fit.
    next_length: Optional[Callable[[Optional[float]], Optional[TrainUnit]]] = None
    core_callbacks: Sequence[Tuple[str, PyTorchCallback]] = ()
    callbacks: Optional[Callbacks] = None
    warm_start: Optional[str] = None

    def __post_init__(self) -> None:
        policy, policies = self.checkpoint_policy, tuple(p.value for p in CheckpointPolicy)
        if policy is not None and policy not in policies:
            raise ValueError(f"checkpoint_policy must be one of {policies}, got {policy!r}")
        if policy is not None:
            object.__setattr__(self, "checkpoint_policy", CheckpointPolicy(policy))  # frozen
        for field in ("max_length", "validation_period", "checkpoint_period", "reporting_period"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, TrainUnit):
                raise TypeError(
                    f"{field} must be determined_lite.pytorch.Batch(n) or Epoch(n), got {value!r}"
                )

    def given(self, names: Sequence[str]) -> Dict[str, Any]:
        """Those of ``names`` whose value is not the default (what a caller chose)."""
        default = FitPlan()
        return {n: getattr(self, n) for n in names if getattr(self, n) != getattr(default, n)}


CONFIG_FIELDS = (
    "validation_period",
    "checkpoint_period",
    "reporting_period",
    "checkpoint_policy",
    "step_zero_validation",
)
"""The fields an experiment's config sets (``TrainingSettings`` has the same names)."""

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def plan_parameters(
    plan: Callable[P, FitPlan],
) -> Callable[[Callable[[S, FitPlan], R]], Callable[Concatenate[S, P], R]]:
    """A method ``(self, plan)`` made to take ``plan``'s constructor parameters instead (for type
    checkers and ``inspect.signature`` alike): ``fit(max_length=Batch(4))`` runs
    ``fit(self, FitPlan(max_length=Batch(4)))``. The parameters are written once, on the plan."""

    def wrap(method: Callable[[S, FitPlan], R]) -> Callable[Concatenate[S, P], R]:
        @functools.wraps(method)
        def with_parameters(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
            return method(self, plan(*args, **kwargs))

        signature = inspect.signature(plan)
        own = inspect.signature(method)
        first = next(iter(own.parameters.values()))
        setattr(  # noqa: B010 -- what inspect.signature (help(), IDEs) reads
            with_parameters,
            "__signature__",
            signature.replace(
                parameters=[first, *signature.parameters.values()], return_annotation=own.return_annotation
            ),
        )
        return with_parameters

    return wrap
