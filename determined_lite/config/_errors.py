"""Config errors: one readable line naming the file, the dotted field path and what was expected.

Pydantic's ``ValidationError`` is a multi-line dump meant for developers; users of
``det-lite experiment create`` get :class:`ConfigError` instead, built from the first error.
Validators inside the schema raise :class:`FieldError` to point below the field they check
(``hyperparameters.lr.maxval``), which pydantic alone cannot do from a field validator.
"""

from __future__ import annotations

import datetime
import difflib
from typing import Any, Iterable, Optional, Sequence, Tuple

Loc = Tuple[Any, ...]


class ConfigError(ValueError):
    """A bad experiment config: ``str(e)`` is ``"<file>: <dotted.path>: <what was expected>"``.

    ``path`` is the dotted field path (``""`` for file-level problems such as bad YAML),
    ``message`` what was expected, ``source`` the file (or ``--config`` for a bad override),
    ``line`` the 1-based line of a YAML syntax error.
    """

    def __init__(self, message: str, path: str = "", source: str = "<config>", line: Optional[int] = None):
        self.message = message
        self.path = path
        self.source = source
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.path:
            return f"{self.source}: {self.path}: {self.message}"
        return f"{self.source}: {self.message}"


class FieldError(ValueError):
    """Raised by schema validators: ``loc`` is the path below the field being validated."""

    def __init__(self, loc: Loc, message: str):
        super().__init__(message)
        self.loc = tuple(loc)
        self.message = message


def format_path(loc: Iterable[Any]) -> str:
    """``("hyperparameters", "x", "vals", 0)`` -> ``"hyperparameters.x.vals[0]"``."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(value: Any, limit: int = 100) -> str:
    """A short rendering of a user-supplied value for error messages."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"{value!r} (YAML read a date; quote it to make it a string)"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unknown_field_message(key: Any, known: Sequence[str], label: str, also: Sequence[str] = ()) -> str:
    """"unknown field" with the closest of ``known`` (else of ``also``), or the list of ``known``."""
    for names in (known, also):
        close = difflib.get_close_matches(str(key), list(names), n=1, cutoff=0.6)
        close = close or [k for k in names if len(str(key)) >= 3 and (str(key) in k or k in str(key))][:1]
        if close:
            return f"unknown field (did you mean {close[0]!r}?)"
    return f"unknown field; {label} fields are: {', '.join(known)}"


_MISSING_HINTS = {
    "entrypoint": "missing required field: the trial class as 'package.module:TrialClass'",
    "hyperparameters": "missing required section: it must define at least global_batch_size",
    "searcher": "missing required section: {name, metric, max_length, ...}",
    "searcher.metric": "missing required field: the name of the validation metric to optimize",
    "searcher.max_length": "missing required field: {batches|records|epochs: positive int}",
}


def translate(err: dict) -> Tuple[Loc, str]:
    """One pydantic error dict -> (location, message in plain words)."""
    loc: Loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    got = describe(err.get("input"))
    ctx = {k: _number(v) for k, v in ctx.items()}
    if kind in ("value_error", "assertion_error") and isinstance(ctx.get("error"), FieldError):
        inner = ctx["error"]
        return loc + inner.loc, inner.message
    if kind in ("value_error", "assertion_error"):
        return loc, str(ctx.get("error", err.get("msg", "")))
    if kind == "missing":
        return loc, _MISSING_HINTS.get(format_path(loc), "missing required field")
    messages = {
        "int_type": f"expected an integer, got {got}",
        "int_parsing": f"expected an integer, got {got}",
        "int_from_float": f"expected an integer, got {got}",
        "bool_type": f"expected true or false, got {got}",
        "bool_parsing": f"expected true or false, got {got}",
        "string_type": f"expected a string, got {got}",
        "float_type": f"expected a number, got {got}",
        "float_parsing": f"expected a number, got {got}",
        "list_type": f"expected a list, got {got}",
        "dict_type": f"expected a mapping, got {got}",
        "model_type": f"expected a mapping, got {got}",
        "model_attributes_type": f"expected a mapping, got {got}",
        "greater_than_equal": f"expected a value >= {ctx.get('ge')}, got {got}",
        "greater_than": f"expected a value > {ctx.get('gt')}, got {got}",
        "less_than_equal": f"expected a value <= {ctx.get('le')}, got {got}",
        "less_than": f"expected a value < {ctx.get('lt')}, got {got}",
        "literal_error": f"expected {ctx.get('expected')}, got {got}",
        "too_short": "must not be empty",
        "extra_forbidden": "unknown field",
    }
    return loc, messages.get(kind, f"{err.get('msg', 'invalid value')}, got {got}")


def _number(value: Any) -> Any:
    """Bounds from pydantic come as floats for float fields: show 1.0 as 1."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def first_error(exc: Any, prefix: Loc = ()) -> Tuple[Loc, str]:
    """The first error of a pydantic ``ValidationError`` as (location, message).

    ``prefix``: where the validated model sits in the config (``("searcher",)`` when a section
    is validated alone), so that locations and messages read as for the whole config.
    """
    errors = exc.errors(include_url=False)
    if not errors:
        return prefix, str(exc)
    err = dict(errors[0])
    err["loc"] = tuple(prefix) + tuple(err.get("loc", ()))
    return translate(err)
