"""Hyperparameters: Determined's forms, validated and brought to one normal form.

Normal form (what ``ExperimentConfig.hyperparameters`` holds and searchers consume): a mapping
from name to either a nested mapping of the same kind (a hyperparameter group, kept nested) or
a typed leaf, always with every key present:

- ``{"type": "const", "val": v}``: any plain value (scalar, list, or ``{type: const, val}``);
- ``{"type": "int", "minval": int, "maxval": int, "count": int | None}``;
- ``{"type": "double", "minval": float, "maxval": float, "count": int | None}``;
- ``{"type": "log", "minval": float, "maxval": float, "base": float, "count": int | None}``:
  the value is ``base ** x`` with the exponent ``x`` in ``[minval, maxval]``; ``base`` defaults
  to 10 (Determined requires it);
- ``{"type": "categorical", "vals": [v, ...]}`` (at least one value).

``minval < maxval`` is required (as in Determined); ``count`` (>= 1) is how many grid points
the grid searcher takes from the range. A mapping that has a ``type`` key is a typed leaf, so a
constant mapping with a ``type`` key must be written ``{type: const, val: {...}}``.
"""

from __future__ import annotations

import copy
import difflib
from typing import Annotated, Any, ClassVar, Dict, List, Literal, Optional, Tuple, Type

from pydantic import Field, StrictInt, ValidationError, model_validator

from determined_lite.config._base import PositiveInt, Section, check_json
from determined_lite.config._errors import FieldError, describe, first_error


class _Typed(Section):
    null_is_default: ClassVar[bool] = False


class ConstHP(_Typed):
    label: ClassVar[str] = "a const hyperparameter's"
    type: Literal["const"]
    val: Any


class _Range(_Typed):
    """An int, double or log range: ``minval < maxval``; ``count``: its grid points."""

    type: str
    minval: float
    maxval: float
    count: Optional[PositiveInt] = None

    @model_validator(mode="after")
    def _ordered_range(self) -> "_Range":
        if not self.minval < self.maxval:
            raise FieldError(("maxval",), f"must be greater than minval ({self.minval}), got {self.maxval}")
        return self


class IntHP(_Range):
    label: ClassVar[str] = "an int hyperparameter's"
    type: Literal["int"]
    minval: StrictInt
    maxval: StrictInt


class DoubleHP(_Range):
    label: ClassVar[str] = "a double hyperparameter's"
    type: Literal["double"]


class LogHP(_Range):
    label: ClassVar[str] = "a log hyperparameter's"
    type: Literal["log"]
    base: Annotated[float, Field(gt=0)] = 10.0

    @model_validator(mode="after")
    def _base_not_one(self) -> "LogHP":
        if self.base == 1:
            raise FieldError(("base",), "expected a positive number other than 1, got 1")
        return self


class CategoricalHP(_Typed):
    label: ClassVar[str] = "a categorical hyperparameter's"
    type: Literal["categorical"]
    vals: Annotated[List[Any], Field(min_length=1)]


TYPES: Dict[str, Type[Section]] = {
    "const": ConstHP,
    "int": IntHP,
    "double": DoubleHP,
    "log": LogHP,
    "categorical": CategoricalHP,
}


def normalize_hyperparameters(raw: Any) -> Dict[str, Any]:
    """Validate Determined's hyperparameter forms; return the normal form (see module docstring)."""
    if not isinstance(raw, dict):
        raise FieldError((), f"expected a mapping of hyperparameter names to values, got {describe(raw)}")
    return _group(raw, ())


def _group(raw: Dict[Any, Any], loc: Tuple[Any, ...]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise FieldError(loc, f"hyperparameter names must be non-empty strings, got {name!r}")
        out[name] = _leaf(value, loc + (name,))
    return out


def _leaf(value: Any, loc: Tuple[Any, ...]) -> Any:
    if not isinstance(value, dict):
        check_json(value, loc)
        return {"type": "const", "val": value}
    if "type" not in value:
        _check_not_a_spec(value, loc)
        return _group(value, loc)
    kind = value["type"]
    if kind not in TYPES:
        raise FieldError(
            loc + ("type",),
            f"expected 'const', 'int', 'double', 'log' or 'categorical', got {describe(kind)} "
            "(a constant mapping with a 'type' key is written {type: const, val: {...}})",
        )
    try:
        model = TYPES[kind].model_validate(value)
    except ValidationError as e:
        sub, message = first_error(e)
        raise FieldError(loc + sub, message) from None
    normal = model.model_dump()
    if kind == "const":
        check_json(normal["val"], loc + ("val",))
    elif kind == "categorical":
        check_json(normal["vals"], loc + ("vals",))
    return normal


# Keys that only a searchable hyperparameter has: a mapping with one of them and no ``type`` is a
# mistyped spec, not a group (``base`` and ``count`` alone are ordinary group member names). A key
# close to "type" (``tpye``) counts when the mapping has one of these or its value is a type name.
SPEC_KEYS = ("minval", "maxval", "vals")


def _check_not_a_spec(value: Dict[Any, Any], loc: Tuple[Any, ...]) -> None:
    """A group must not look like a search spec whose ``type`` is missing or misspelled: that
    mapping would silently become a constant and every trial would receive the dict."""
    spec_keys = [k for k in SPEC_KEYS if k in value]
    names = [k for k in value if isinstance(k, str) and (spec_keys or _is_type_name(value[k]))]
    near_type = difflib.get_close_matches("type", names, n=1, cutoff=0.7)
    if near_type:
        raise FieldError(
            loc + (near_type[0],),
            f"unknown key {near_type[0]!r}; did you mean 'type'? (a hyperparameter spec needs "
            "type: const, int, double, log or categorical)",
        )
    if spec_keys:
        raise FieldError(
            loc,
            f"has {', '.join(spec_keys)} but no 'type'; expected type: int, double, log or categorical "
            "(a constant mapping with these keys is written {type: const, val: {...}})",
        )


def _is_type_name(value: Any) -> bool:
    return isinstance(value, str) and value in TYPES


def iter_leaves(
    hparams: Dict[str, Any], loc: Tuple[str, ...] = ()
) -> List[Tuple[Tuple[str, ...], Dict[str, Any]]]:
    """Every typed leaf of a normalised hyperparameter mapping with its path, depth first."""
    leaves: List[Tuple[Tuple[str, ...], Dict[str, Any]]] = []
    for name, value in hparams.items():
        if "type" in value:  # in the normal form only typed leaves have a "type" key
            leaves.append((loc + (name,), value))
        else:
            leaves.extend(iter_leaves(value, loc + (name,)))
    return leaves


def searched_paths(hparams: Dict[str, Any]) -> List[Tuple[str, ...]]:
    """Paths of the leaves a searcher varies: every typed leaf but ``const`` and one-value
    ``categorical`` (what tells one trial from another in progress bars and summaries)."""
    return [
        path
        for path, leaf in iter_leaves(hparams)
        if leaf["type"] != "const" and not (leaf["type"] == "categorical" and len(leaf["vals"]) < 2)
    ]


def constant_values(hparams: Dict[str, Any], prefix: str = "hyperparameters") -> Dict[str, Any]:
    """Plain values of a normalised mapping whose leaves are all ``const`` (nested like it).

    For running a fixed config without a searcher (``examples/digits/train.py``, ``Trainer``);
    a searchable leaf raises ValueError naming it.
    """
    out: Dict[str, Any] = {}
    for name, value in hparams.items():
        where = f"{prefix}.{name}"
        if "type" not in value:
            out[name] = constant_values(value, where)
        elif value["type"] == "const":
            out[name] = copy.deepcopy(value["val"])
        else:
            raise ValueError(f"{where}: type {value['type']!r} needs a searcher to pick a value")
    return out
