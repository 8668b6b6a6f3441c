"""Base model of every config section: strict types, unknown fields named with a suggestion."""

from __future__ import annotations

import datetime
import math
from typing import Annotated, Any, ClassVar, Dict, Optional, Sequence, Tuple

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, StrictInt, model_validator

from determined_lite.config._errors import FieldError, describe, unknown_field_message


class Section(BaseModel):
    """Strict (no ``"5"`` -> 5, no ``true`` -> 1), closed (unknown keys are errors).

    ``null_is_default``: like Determined, an explicit ``null`` means "use the default".
    """

    model_config = ConfigDict(strict=True, extra="forbid", validate_default=False)

    label: ClassVar[str] = "this section's"
    # Determined fields det-lite removes before validation: typos of them get a suggestion too.
    determined_only: ClassVar[Tuple[str, ...]] = ()
    null_is_default: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        check_known_keys(data, list(cls.model_fields), cls.label, cls.determined_only)
        if cls.null_is_default:
            return {k: v for k, v in data.items() if v is not None}
        return data


def check_known_keys(data: Any, known: Sequence[str], label: str, also: Sequence[str] = ()) -> None:
    """A FieldError naming the first key of the mapping ``data`` that is not one of ``known``
    (with the closest known or ``also`` name): checked before anything else of a section, so an
    unknown key (``nàme``, ``nme``) is named rather than the field it was meant to be reported
    missing."""
    if not isinstance(data, dict):
        raise FieldError((), f"expected a mapping, got {describe(data)}")
    for key in data:
        if not isinstance(key, str):
            raise FieldError((), f"field names must be strings, got {key!r}")
        if key not in known:
            raise FieldError((key,), unknown_field_message(key, list(known), label, also))


PositiveInt = Annotated[StrictInt, Field(ge=1)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]

_SCALARS = (bool, int, float, str)
INT_LIMIT = 2**63  # integers are stored in SQLite and handed to torch as 64-bit


def check_numbers(value: Any, loc: Tuple[Any, ...] = ()) -> None:
    """Raise FieldError at the first number no experiment can use: a float that is not finite
    (YAML's ``.inf``/``.nan``, or ``1e400``, which reads as inf) or an integer beyond 64 bits."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FieldError(
            loc,
            f"expected a finite number, got {value} (YAML reads .inf, .nan and numbers beyond "
            "1.8e308, such as 1e400, as non-finite)",
        )
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value < INT_LIMIT:
        raise FieldError(loc, f"expected an integer below 2**63, got {describe(value)}")
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_numbers(item, loc + (i,))
    elif isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, loc + (key,))


def check_json(value: Any, loc: Tuple[Any, ...] = ()) -> None:
    """Raise FieldError unless ``value`` is made of JSON types (what the store and workers receive)."""
    if value is None or isinstance(value, _SCALARS):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, loc + (i,))
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise FieldError(loc, f"mapping keys must be strings, got {key!r}")
            check_json(item, loc + (key,))
        return
    if isinstance(value, (datetime.date, datetime.datetime)):
        raise FieldError(loc, f"expected a JSON value, got {describe(value)}")
    raise FieldError(
        loc,
        f"expected a JSON value (string, number, boolean, null, list or mapping), "
        f"got {type(value).__name__} {describe(value)}",
    )


LENGTH_UNITS = ("batches", "records", "epochs")


def _length(value: Any, *, positive: bool) -> Optional[Dict[str, int]]:
    """``{batches|records|epochs: n}`` (a bare ``n >= 1``: batches); ``{unit: 0}`` -> None."""
    bound = "positive int" if positive else "int >= 0"
    expected = f"expected {{batches|records|epochs: {bound}}}"
    if positive and isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return {"batches": value}  # older Determined: a bare number of batches
    if not isinstance(value, dict) or len(value) != 1:
        raise FieldError((), f"{expected}, got {describe(value)}")
    ((unit, n),) = value.items()
    ok = (
        unit in LENGTH_UNITS
        and isinstance(n, int)
        and not isinstance(n, bool)
        and n >= (1 if positive else 0)
    )
    if not ok:
        raise FieldError((), f"{expected}, got {describe(value)}")
    return {unit: n} if n else None


MaxLength = Annotated[Dict[str, int], PlainValidator(lambda v: _length(v, positive=True))]
Period = Annotated[Optional[Dict[str, int]], PlainValidator(lambda v: _length(v, positive=False))]
