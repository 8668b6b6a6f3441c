"""adaptive_asha: several brackets of asynchronous successive halving (ASHA), as Determined runs it.

Plan (fixed by the config):
  * ``R = min(max_rungs, ⌊log_divisor(max_length)⌋ + 1, ⌊log_divisor(max_trials)⌋ + 1)``.
  * ``mode`` picks the brackets' rung counts: aggressive ``[R]``; standard ``R`` down to
    ``(R - 1) // 2 + 1``; conservative ``R`` down to 1. Brackets with more rungs (more early
    stopping) come first.
  * ``max_trials`` is split so every bracket gets about the same training budget (weight
    ``divisor^(r-1) / r``, at least 1 trial each, the remainder to the first bracket);
    ``max_concurrent_trials`` is split evenly (remainder to the first brackets; when unset each
    bracket gets ``max(trials of the last bracket, divisor)``).
  * Rung ``i`` of an ``r``-rung bracket trains to ``max(⌊max_length / divisor^(r-1-i)⌋, 1)``
    units in total (forced strictly increasing, as Determined trains at least 1 more unit).

Each bracket (asynchronous successive halving):
  * starts ``min(its max_concurrent_trials, its max_trials)`` trials at rung 0;
  * when a trial reports at rung ``i`` as the k-th one there, it is promoted at once
    (``ValidateAfter`` with rung ``i+1``'s length; the runner resumes it from its checkpoint)
    if it ranks in the top ``⌊k / divisor⌋`` so far; if ``⌊k / divisor⌋`` grew, the trial now at
    that rank is promoted instead (if not already). So at any time the best ``⌊k / divisor⌋``
    trials of a rung have been promoted;
  * whenever a report promotes no one, a new trial is created (until ``max_trials``);
  * a trial at the top rung is closed when it reports; once all ``max_trials`` have reported
    at rung 0, every unpromoted trial of each rung that has nothing left in flight (scanning up
    from rung 0) is closed — it can no longer be promoted.

Trials that exit early:
  * ``invalid_hp``: its metrics are removed from every rung and a new random trial replaces it;
    it does not count against ``max_trials``.
  * ``errored`` / ``user_canceled``: the trial counts, with the worst possible metric at its rung
    (if that still earns a promotion, it is passed on as the worst result of the next rung).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Annotated, Any, Callable, ClassVar, Dict, Final, List, Literal, Mapping, Optional, Set

from pydantic import Field

from determined_lite.config import NonNegativeInt, PositiveInt, SearcherSettings
from determined_lite.searcher._base import (
    WORST_METRIC,
    BudgetSection,
    Rung,
    RungReport,
    SearchMethod,
    TrialFactory,
    oriented,
)
from determined_lite.searcher._ops import Close, Create, ExitReason, Operation, ValidateAfter

# Determined's defaults for adaptive_asha's own fields (max_concurrent_trials 0: the searcher chooses).
DEFAULT_ASHA_MAX_CONCURRENT_TRIALS = 0
DEFAULT_DIVISOR = 4
DEFAULT_MAX_RUNGS = 5
DEFAULT_MODE: Final = "standard"


class AdaptiveASHAConfig(BudgetSection):
    """``searcher`` of ``name: adaptive_asha`` (``max_concurrent_trials`` 0: the searcher chooses);
    its rungs need a length, even for a script."""

    needs_length: ClassVar[bool] = True

    name: Literal["adaptive_asha"]
    max_concurrent_trials: NonNegativeInt = DEFAULT_ASHA_MAX_CONCURRENT_TRIALS
    divisor: Annotated[float, Field(gt=1)] = DEFAULT_DIVISOR
    max_rungs: PositiveInt = DEFAULT_MAX_RUNGS
    mode: Literal["aggressive", "standard", "conservative"] = DEFAULT_MODE


@dataclasses.dataclass(frozen=True)
class AshaSettings:
    """adaptive_asha's own fields, read from a validated ``searcher`` section (a field a stored
    config lacks takes Determined's default)."""

    divisor: float = float(DEFAULT_DIVISOR)
    max_rungs: int = DEFAULT_MAX_RUNGS
    mode: str = DEFAULT_MODE

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "AshaSettings":
        d = cls()  # a field left out, or None, takes the default (a validated value is never falsy)
        return cls(
            divisor=float(section.get("divisor") or d.divisor),
            max_rungs=int(section.get("max_rungs") or d.max_rungs),
            mode=str(section.get("mode") or d.mode),
        )


@dataclasses.dataclass(frozen=True)
class BracketPlan:
    """One bracket: its rung count, trial budget, initial concurrency and rung lengths (totals)."""

    num_rungs: int
    max_trials: int
    max_concurrent_trials: int
    rung_lengths: List[int]


def _levels(n: int, divisor: float) -> int:
    """``⌊log_divisor(n)⌋ + 1``, computed exactly (no float log rounding at exact powers)."""
    k = 0
    while divisor ** (k + 1) <= n:
        k += 1
    return k + 1


def bracket_rungs(mode: str, max_rungs: int) -> List[int]:
    """Rung counts of the brackets for ``mode``, most rungs first."""
    if mode == "aggressive":
        rungs = [max_rungs]
    elif mode == "standard":
        rungs = list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    elif mode == "conservative":
        rungs = list(range(1, max_rungs + 1))
    else:
        raise ValueError(f"searcher.mode: expected standard, aggressive or conservative, got {mode!r}")
    return sorted(rungs, reverse=True)


def bracket_max_trials(max_trials: int, divisor: float, rungs: List[int]) -> List[int]:
    """Split ``max_trials`` so each bracket gets about the same total training budget."""
    weights = [divisor ** (r - 1) / r for r in rungs]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent(max_concurrent: Optional[int], divisor: float, trials: List[int]) -> List[int]:
    """Split ``max_concurrent_trials`` evenly over the brackets (see the module docstring)."""
    n = len(trials)
    if not max_concurrent:
        return [max(trials[-1], int(divisor))] * n
    max_concurrent = max(max_concurrent, n)
    out = [max_concurrent // n] * n
    for i in range(max_concurrent % n):
        out[i] += 1
    return out


def rung_lengths(max_length: int, divisor: float, num_rungs: int) -> List[int]:
    """Total training length at each rung; strictly increasing, the last is ``max_length``
    whenever the rungs fit (they always do for the plan's ``R``)."""
    base = [max(int(max_length / divisor ** (num_rungs - 1 - i)), 1) for i in range(num_rungs)]
    totals = [base[0]]
    for i in range(1, num_rungs):
        totals.append(totals[-1] + max(base[i] - base[i - 1], 1))
    return totals


def plan_brackets(settings: SearcherSettings) -> List[BracketPlan]:
    """The brackets an adaptive_asha config runs."""
    assert settings.max_trials is not None
    asha = AshaSettings.from_section(settings.section)
    d = asha.divisor
    top = min(asha.max_rungs, _levels(settings.max_length, d), _levels(settings.max_trials, d))
    rungs = bracket_rungs(asha.mode, top)
    trials = bracket_max_trials(settings.max_trials, d, rungs)
    concurrent = bracket_max_concurrent(settings.max_concurrent_trials, d, trials)
    return [
        BracketPlan(r, t, c, rung_lengths(settings.max_length, d, r))
        for r, t, c in zip(rungs, trials, concurrent)
    ]


class _Rung:
    """Reports at one rung, best first: ``[request_id, metric, promoted]`` (metric: smaller is better)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.metrics: List[List[Any]] = []
        self.outstanding = 0  # trials training towards this rung

    def insert(
        self, request_id: str, metric: float, divisor: float, can_promote: Callable[[str], bool]
    ) -> Optional[str]:
        """Record a report; return the trial to promote now, if any."""
        n = len(self.metrics)
        old_quota, quota = int(n / divisor), int((n + 1) / divisor)
        # After equal metrics: an earlier report keeps the better rank on ties.
        index = bisect.bisect_right([m[1] for m in self.metrics], metric)
        promote_now = index < quota
        self.metrics.insert(index, [request_id, metric, promote_now])
        if promote_now:
            return request_id
        if quota != old_quota:
            entry = self.metrics[old_quota]
            # A trial the searcher already closed cannot come back (only reachable after an
            # invalid_hp trial's metrics were removed); Determined would promote it anyway.
            if not entry[2] and can_promote(entry[0]):
                entry[2] = True
                return entry[0]
        return None

    def remove(self, request_id: str) -> None:
        self.metrics = [m for m in self.metrics if m[0] != request_id]


class _Bracket:
    """One asynchronous successive-halving bracket."""

    def __init__(self, plan: BracketPlan, divisor: float) -> None:
        self.plan = plan
        self.divisor = divisor
        self.rungs = [_Rung(length) for length in plan.rung_lengths]
        self.trial_rung: Dict[str, int] = {}  # every trial created, by the rung it is at
        self.early_exit: Set[str] = set()
        self.closed: Set[str] = set()  # closed by the searcher, or exited early
        self.invalid = 0

    # ---- bookkeeping -------------------------------------------------------------------------
    @property
    def counted_trials(self) -> int:
        """Trials created that count against ``max_trials`` (invalid_hp ones do not)."""
        return len(self.trial_rung) - self.invalid

    def done(self) -> bool:
        return self.counted_trials >= self.plan.max_trials and len(self.closed) == len(self.trial_rung)

    def progress(self) -> float:
        # Determined's estimate: trials reported at rung 0 (with 20% headroom), then trials done.
        reported = len(self.rungs[0].metrics)
        value = reported / (1.2 * self.plan.max_trials)
        if reported == self.plan.max_trials:
            value = max(value, (len(self.closed) - self.invalid) / self.plan.max_trials)
        return min(value, 1.0)

    def _can_promote(self, request_id: str) -> bool:
        return request_id not in self.closed or request_id in self.early_exit

    def _create(self, factory: TrialFactory) -> List[Operation]:
        create = factory.create()
        self.trial_rung[create.request_id] = 0
        self.rungs[0].outstanding += 1
        return [create, ValidateAfter(create.request_id, self.rungs[0].length)]

    # ---- events ------------------------------------------------------------------------------
    def initial_operations(self, factory: TrialFactory) -> List[Operation]:
        ops: List[Operation] = []
        for _ in range(min(self.plan.max_concurrent_trials, self.plan.max_trials)):
            ops += self._create(factory)
        return ops

    def report(self, request_id: str, metric: float, factory: TrialFactory) -> List[Operation]:
        """The trial finished training to its rung's length with ``metric`` (smaller is better)."""
        ops: List[Operation] = []
        promoted_workload = False
        # An early-exited trial that earns a promotion is passed on as the worst result of the
        # next rung; loop until someone trains or no one is promoted.
        while True:
            index = self.trial_rung[request_id]
            rung = self.rungs[index]
            rung.outstanding -= 1
            if index == len(self.rungs) - 1:
                rung.metrics.append([request_id, metric, False])
                if request_id not in self.early_exit:
                    ops.append(Close(request_id))
                    self.closed.add(request_id)
                break
            promoted = rung.insert(request_id, metric, self.divisor, self._can_promote)
            if promoted is None:
                break
            self.trial_rung[promoted] = index + 1
            self.rungs[index + 1].outstanding += 1
            if promoted not in self.early_exit:
                ops.append(ValidateAfter(promoted, self.rungs[index + 1].length))
                promoted_workload = True
                break
            request_id, metric = promoted, WORST_METRIC

        if not promoted_workload and self.counted_trials < self.plan.max_trials:
            ops += self._create(factory)
        if len(self.rungs[0].metrics) == self.plan.max_trials:
            ops += self._close_out()
        return ops

    def exited(
        self, request_id: str, reason: str, outstanding: bool, factory: TrialFactory
    ) -> List[Operation]:
        """The trial stopped early; ``outstanding``: it was training towards its rung."""
        self.early_exit.add(request_id)
        self.closed.add(request_id)
        index = self.trial_rung[request_id]
        if reason == ExitReason.INVALID_HP:
            self.invalid += 1
            if outstanding:
                self.rungs[index].outstanding -= 1
            for rung in self.rungs[: index + 1]:
                rung.remove(request_id)
            return self._create(factory)
        if not outstanding:
            # Already reported at its rung: if it is promoted later it counts as the worst there.
            return []
        return self.report(request_id, WORST_METRIC, factory)

    def _close_out(self) -> List[Operation]:
        """Close the unpromoted trials of every rung that has nothing in flight, from rung 0 up."""
        ops: List[Operation] = []
        for rung in self.rungs:
            if rung.outstanding > 0:
                break
            for request_id, _, promoted in rung.metrics:
                if not promoted and request_id not in self.closed:
                    ops.append(Close(request_id))
                    self.closed.add(request_id)
        return ops

    # ---- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {
            "rungs": [
                {"metrics": [list(m) for m in r.metrics], "outstanding": r.outstanding} for r in self.rungs
            ],
            "trial_rung": dict(self.trial_rung),
            "early_exit": sorted(self.early_exit),
            "closed": sorted(self.closed),
            "invalid": self.invalid,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for rung, saved in zip(self.rungs, state["rungs"]):
            rung.metrics = [[m[0], float(m[1]), bool(m[2])] for m in saved["metrics"]]
            rung.outstanding = int(saved["outstanding"])
        self.trial_rung = {k: int(v) for k, v in state["trial_rung"].items()}
        self.early_exit = set(state["early_exit"])
        self.closed = set(state["closed"])
        self.invalid = int(state["invalid"])


class AdaptiveASHASearch(SearchMethod):
    """Determined's adaptive_asha: the brackets of :func:`plan_brackets`, run side by side."""

    config = AdaptiveASHAConfig

    def __init__(self, settings: SearcherSettings, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(settings, space, seed)
        self.plan = plan_brackets(settings)
        divisor = AshaSettings.from_section(settings.section).divisor
        self._brackets = [_Bracket(p, divisor) for p in self.plan]
        self._bracket_of: Dict[str, int] = {}
        self._target: Dict[str, Optional[int]] = {}  # pending ValidateAfter length; None when idle

    @property
    def total_trials(self) -> int:
        return sum(p.max_trials for p in self.plan)

    def bracket_of(self, request_id: str) -> int:
        return self._bracket(request_id)

    def _bracket(self, request_id: str) -> int:
        if request_id not in self._bracket_of:
            raise KeyError(f"adaptive_asha searcher: unknown trial request id {request_id!r}")
        return self._bracket_of[request_id]

    def _track(self, bracket: int, ops: List[Operation]) -> List[Operation]:
        for op in ops:
            if isinstance(op, Create):
                self._bracket_of[op.request_id] = bracket
            elif isinstance(op, ValidateAfter):
                self._target[op.request_id] = op.length
        return self._shutdown_if_done(ops, all(b.done() for b in self._brackets))

    def initial_operations(self) -> List[Operation]:
        self._start()
        ops: List[Operation] = []
        for i, bracket in enumerate(self._brackets):
            ops += self._track(i, bracket.initial_operations(self.factory))
        return ops

    def on_validation_completed(self, request_id: str, metric: float, length: int) -> List[Operation]:
        self._check_event()
        b = self._bracket(request_id)
        target = self._target.get(request_id)
        if target is None:
            raise RuntimeError(f"adaptive_asha searcher: trial {request_id!r} has no pending ValidateAfter")
        if length < target:
            return []
        self._target[request_id] = None
        value = oriented(metric, self.smaller_is_better)
        return self._track(b, self._brackets[b].report(request_id, value, self.factory))

    def on_trial_exited_early(self, request_id: str, reason: str) -> List[Operation]:
        self._check_event(reason)
        b = self._bracket(request_id)
        bracket = self._brackets[b]
        if request_id in bracket.closed:
            raise RuntimeError(f"adaptive_asha searcher: trial {request_id!r} is already closed")
        outstanding = self._target.get(request_id) is not None
        self._target[request_id] = None
        return self._track(b, bracket.exited(request_id, reason, outstanding, self.factory))

    def progress(self) -> float:
        if self._shutdown:
            return 1.0
        return sum(b.progress() for b in self._brackets) / len(self._brackets)

    def _plan(self) -> Dict[str, Any]:
        return {"brackets": [dataclasses.asdict(p) for p in self.plan]}

    @classmethod
    def saved_rungs(cls, state: Mapping[str, Any], smaller_is_better: bool) -> Optional[List[Rung]]:
        """Every rung of every bracket of a saved ``state_dict()``, bracket by bracket, each
        rung's reports best first (metrics as the trials reported them)."""
        out = []
        for b, (plan, bracket) in enumerate(zip(state["plan"]["brackets"], state["search"]["brackets"])):
            closed = {str(r) for r in bracket.get("closed", [])}
            last = len(plan["rung_lengths"]) - 1  # a trial closed there trained its full length
            for i, (length, rung) in enumerate(zip(plan["rung_lengths"], bracket["rungs"])):
                reports = [  # the rungs hold metrics as smaller-is-better
                    RungReport(
                        rid,
                        m if smaller_is_better else -m,
                        bool(up),
                        i < last and not up and str(rid) in closed,
                    )
                    for rid, m, up in rung.get("metrics", [])
                ]
                out.append(Rung(bracket=b, index=i, length=length, reports=reports))
        return out

    def _search_state(self) -> Dict[str, Any]:
        return {
            "bracket_of": dict(self._bracket_of),
            "target": dict(self._target),
            "brackets": [b.state_dict() for b in self._brackets],
        }

    def _load_search_state(self, state: Mapping[str, Any]) -> None:
        self._bracket_of = {k: int(v) for k, v in state["bracket_of"].items()}
        self._target = {k: (None if v is None else int(v)) for k, v in state["target"].items()}
        for bracket, saved in zip(self._brackets, state["brackets"]):
            bracket.load_state_dict(saved)
