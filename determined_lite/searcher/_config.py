"""The searcher section of an experiment config, checked and turned into typed settings."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Mapping, Optional

SEARCHERS = ("single", "grid", "random", "adaptive_asha")
MODES = ("standard", "aggressive", "conservative")
UNITS = ("batches", "records", "epochs")


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def unit_of(max_length: Any) -> str:
    """The unit of ``max_length`` (``{batches|records|epochs: n}``): "batches", "records" or "epochs"."""
    if not isinstance(max_length, Mapping) or len(max_length) != 1:
        raise ValueError(
            "searcher.max_length: expected one of {batches: N}, {records: N}, {epochs: N}, "
            f"got {max_length!r}"
        )
    ((unit, n),) = max_length.items()
    if unit not in UNITS:
        raise ValueError(f"searcher.max_length: unknown unit {unit!r}; expected batches, records or epochs")
    if not _is_int(n) or n < 1:
        raise ValueError(f"searcher.max_length.{unit}: expected a positive integer, got {n!r}")
    return unit


@dataclasses.dataclass(frozen=True)
class SearcherSettings:
    """The fields the searchers use; ``max_length`` is the integer in ``unit``."""

    name: str
    metric: str
    smaller_is_better: bool
    unit: str
    max_length: int
    max_trials: Optional[int]
    max_concurrent_trials: Optional[int]
    divisor: float
    max_rungs: int
    mode: str


def _opt_int(conf: Mapping[str, Any], field: str, minimum: int) -> Optional[int]:
    value = conf.get(field)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"searcher.{field}: expected {kind}, got {value!r}")
    return int(value)


def parse_settings(conf: Any) -> SearcherSettings:
    """Check the searcher config and return typed settings; errors name the field."""
    if not isinstance(conf, Mapping):
        raise ValueError(f"searcher: expected a mapping, got {type(conf).__name__}")
    name = conf.get("name")
    if name not in SEARCHERS:
        raise ValueError(
            f"searcher.name: unsupported searcher {name!r}; expected one of {', '.join(SEARCHERS)}"
        )
    metric = conf.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"searcher.metric: expected the name of a validation metric, got {metric!r}")
    smaller = conf.get("smaller_is_better", True)
    if not isinstance(smaller, bool):
        raise ValueError(f"searcher.smaller_is_better: expected true or false, got {smaller!r}")
    max_length = conf.get("max_length")
    if max_length is None:
        raise ValueError("searcher.max_length: required, e.g. {batches: 1000}")
    unit = unit_of(max_length)

    max_trials = _opt_int(conf, "max_trials", 1)
    if name in ("random", "adaptive_asha") and max_trials is None:
        raise ValueError(f"searcher.max_trials: required by the {name} searcher")
    max_concurrent = _opt_int(conf, "max_concurrent_trials", 0)

    divisor = conf.get("divisor", 4)
    if divisor is None:
        divisor = 4
    if isinstance(divisor, bool) or not isinstance(divisor, numbers.Real) or not math.isfinite(divisor):
        raise ValueError(f"searcher.divisor: expected a number greater than 1, got {divisor!r}")
    if divisor <= 1:
        raise ValueError(f"searcher.divisor: expected a number greater than 1, got {divisor!r}")
    max_rungs = conf.get("max_rungs", 5)
    max_rungs = 5 if max_rungs is None else max_rungs
    if not _is_int(max_rungs) or max_rungs < 1:
        raise ValueError(f"searcher.max_rungs: expected a positive integer, got {max_rungs!r}")
    mode = conf.get("mode", "standard")
    mode = "standard" if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"searcher.mode: expected one of {', '.join(MODES)}, got {mode!r}")

    return SearcherSettings(
        name=name,
        metric=metric,
        smaller_is_better=smaller,
        unit=unit,
        max_length=int(max_length[unit]),
        max_trials=max_trials,
        max_concurrent_trials=max_concurrent,
        divisor=float(divisor),
        max_rungs=int(max_rungs),
        mode=mode,
    )
