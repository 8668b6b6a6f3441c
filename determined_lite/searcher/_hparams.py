"""Hyperparameter spaces: check the normalised leaves, sample a point, expand a grid.

A *leaf* is a dict whose ``type`` is a string: ``const`` (``val``), ``int`` / ``double``
(``minval``, ``maxval``, optional ``count``), ``log`` (``minval``, ``maxval``, ``base``, optional
``count``; values are ``base ** x`` for x in [minval, maxval], as in Determined) or
``categorical`` (``vals``). Any other dict is a nested group and stays nested in the samples.
Leaves and keys are visited in insertion (config file) order, so sampling and grid order are
deterministic.
"""

from __future__ import annotations

import copy
import itertools
import math
import numbers
import random
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

LEAF_TYPES = ("const", "int", "double", "log", "categorical")

Path = Tuple[str, ...]


def _where(path: Path) -> str:
    return "hyperparameters" + "".join(f".{p}" for p in path)


def is_leaf(node: Any) -> bool:
    """True for a hyperparameter definition, False for a nested group."""
    return isinstance(node, Mapping) and isinstance(node.get("type"), str)


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _check_leaf(path: Path, leaf: Mapping[str, Any], counted_by: Optional[str]) -> None:
    where = _where(path)
    kind = leaf["type"]
    if kind not in LEAF_TYPES:
        raise ValueError(f"{where}.type: unknown type {kind!r}; expected one of {', '.join(LEAF_TYPES)}")
    if kind == "const":
        if "val" not in leaf:
            raise ValueError(f"{where}: a const hyperparameter needs 'val'")
    elif kind == "categorical":
        vals = leaf.get("vals")
        if not isinstance(vals, list) or not vals:
            raise ValueError(
                f"{where}.vals: a categorical hyperparameter needs a non-empty list, got {vals!r}"
            )
    else:
        _check_range(where, kind, leaf, counted_by)


def _check_range(where: str, kind: str, leaf: Mapping[str, Any], counted_by: Optional[str]) -> None:
    """An int, double or log leaf: its bounds, base (log) and count (required by ``counted_by``)."""
    is_ok = _is_int if kind == "int" else _is_number
    expected = "an integer" if kind == "int" else "a finite number"
    for field in ("minval", "maxval"):
        if not is_ok(leaf.get(field)):
            raise ValueError(f"{where}.{field}: expected {expected}, got {leaf.get(field)!r}")
    if leaf["minval"] > leaf["maxval"]:
        raise ValueError(
            f"{where}: minval ({leaf['minval']}) must not be greater than maxval ({leaf['maxval']})"
        )
    if kind == "log":
        base = leaf.get("base")
        if not _is_number(base) or base is None or base <= 0:
            raise ValueError(f"{where}.base: expected a positive number, got {base!r}")
    count = leaf.get("count")
    if count is None:
        if counted_by:
            raise ValueError(
                f"{where}.count: the {counted_by} searcher needs 'count' for {kind} hyperparameters"
            )
    elif not _is_int(count) or count < 1:
        raise ValueError(f"{where}.count: expected a positive integer, got {count!r}")


def leaves(space: Mapping[str, Any], prefix: Path = ()) -> Iterator[Tuple[Path, Mapping[str, Any]]]:
    """Every (path, leaf) of ``space`` in insertion order."""
    for key, node in space.items():
        path = prefix + (str(key),)
        if is_leaf(node):
            yield path, node
        elif isinstance(node, Mapping):
            yield from leaves(node, path)
        else:
            raise ValueError(
                f"{_where(path)}: expected a hyperparameter definition (a mapping with 'type') or a nested "
                f"mapping, got {node!r}"
            )


def check_space(space: Any, counted_by: Optional[str] = None) -> None:
    """Raise ValueError naming the first bad field of ``space``; ``counted_by``: the searcher
    (grid) that needs a ``count`` on every int, double and log hyperparameter."""
    if not isinstance(space, Mapping):
        raise ValueError(f"hyperparameters: expected a mapping, got {type(space).__name__}")
    for path, leaf in leaves(space):
        _check_leaf(path, leaf, counted_by)


def _fill(space: Mapping[str, Any], values: Dict[Path, Any], prefix: Path = ()) -> Dict[str, Any]:
    """A nested dict shaped like ``space`` with each leaf replaced by ``values[path]``."""
    out: Dict[str, Any] = {}
    for key, node in space.items():
        path = prefix + (str(key),)
        out[key] = values[path] if is_leaf(node) else _fill(node, values, path)
    return out


def sample_leaf(leaf: Mapping[str, Any], rng: random.Random) -> Any:
    """One uniform draw: int inclusive of both ends, double in [minval, maxval), log uniform in
    the exponent, categorical uniform over ``vals``; const draws nothing from ``rng``."""
    kind = leaf["type"]
    if kind == "const":
        return copy.deepcopy(leaf["val"])
    if kind == "categorical":
        return copy.deepcopy(leaf["vals"][rng.randrange(len(leaf["vals"]))])
    if kind == "int":
        return rng.randint(int(leaf["minval"]), int(leaf["maxval"]))
    lo, hi = float(leaf["minval"]), float(leaf["maxval"])
    x = lo + rng.random() * (hi - lo)
    return x if kind == "double" else float(leaf["base"]) ** x


def sample(space: Mapping[str, Any], rng: random.Random) -> Dict[str, Any]:
    """A random point of ``space``, nested like it, drawing leaves in insertion order."""
    return _fill(space, {path: sample_leaf(leaf, rng) for path, leaf in leaves(space)})


def _round_half_away(x: float) -> int:
    """Round like Go's math.Round (Determined's grid), not Python's round-half-to-even."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def grid_values(leaf: Mapping[str, Any]) -> List[Any]:
    """The grid axis of one leaf, as Determined builds it.

    ``count`` points evenly spaced including both ends (``count == 1``: the midpoint); ints are
    rounded half away from zero, the count is clamped to the number of integers in the range
    and duplicates are dropped; log points are evenly spaced in the exponent.
    """
    kind = leaf["type"]
    if kind == "const":
        return [copy.deepcopy(leaf["val"])]
    if kind == "categorical":
        return [copy.deepcopy(v) for v in leaf["vals"]]
    lo, hi, count = leaf["minval"], leaf["maxval"], int(leaf["count"])
    if kind == "int":
        count = min(count, hi - lo + 1)
        if count == 1:
            return [_round_half_away((lo + hi) / 2.0)]
        points = [_round_half_away(lo + i * (hi - lo) / (count - 1)) for i in range(count)]
        return list(dict.fromkeys(points))
    if count == 1:
        xs = [(lo + hi) / 2.0]
    else:
        xs = [lo + i * (hi - lo) / (count - 1) for i in range(count)]
    xs = [float(x) for x in xs]
    return xs if kind == "double" else [float(leaf["base"]) ** x for x in xs]


def grid(space: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The cartesian product of every leaf's axis, nested like ``space``.

    The first leaf (in config order) varies slowest. A space without leaves is one point ``{}``.
    """
    paths = [path for path, _ in leaves(space)]
    axes = [grid_values(leaf) for _, leaf in leaves(space)]
    # Deep copies: trials must not share mutable categorical values.
    return [copy.deepcopy(_fill(space, dict(zip(paths, combo)))) for combo in itertools.product(*axes)]
