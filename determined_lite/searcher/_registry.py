"""The searchers det-lite runs, one registry line each, and the config validation built from them.

Adding a searcher is one module (its :class:`SearchMethod` with its ``config`` model, a
``SearcherSection`` whose ``name`` is a one-value ``Literal``) and one line in
:data:`SEARCHERS`. Everything else derives from that tuple: the names that error messages list,
pydantic's discriminated union on ``name`` that validates a ``searcher`` section, the full
experiment config (``config.ExperimentConfig`` with that union as its ``searcher`` field) and
the class :func:`searcher_class` returns for a name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Dict, FrozenSet, Mapping, Sequence, Tuple, Type, Union

from pydantic import Field, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from determined_lite.config import (
    DETERMINED_ONLY_SEARCHERS,
    ExperimentConfig,
    FieldError,
    SearcherSection,
    SearcherSettings,
    check_known_keys,
    describe,
    read_config,
    translate,
    validate_experiment,
    validate_value,
)
from determined_lite.searcher._asha import AdaptiveASHASearch
from determined_lite.searcher._base import SearchMethod
from determined_lite.searcher._simple import GridSearch, RandomSearch, SingleSearch

SEARCHERS: Tuple[Type[SearchMethod], ...] = (
    SingleSearch,
    GridSearch,
    RandomSearch,
    AdaptiveASHASearch,
)

_BY_NAME: Dict[str, Type[SearchMethod]] = {searcher.name: searcher for searcher in SEARCHERS}
_ALL_FIELDS: FrozenSet[str] = frozenset(f for s in SEARCHERS for f in s.config.model_fields)
_QUOTED = [repr(name) for name in _BY_NAME]
_EXPECTED = "expected " + " or ".join(filter(None, (", ".join(_QUOTED[:-1]), _QUOTED[-1])))  # 'a', 'b' or 'c'


def searcher_class(name: str) -> Type[SearchMethod]:
    """The searcher registered as ``name`` (a validated ``searcher.name``)."""
    return _BY_NAME[name]


def _check_name(value: Any) -> Type[SearchMethod]:
    """The searcher a section names, or a FieldError: a key no searcher has (named first: a
    misspelt ``name`` is that key, not a missing name), or the registered names."""
    check_known_keys(value, sorted(_ALL_FIELDS), SearcherSection.label, SearcherSection.determined_only)
    name = value.get("name")
    if name is None:
        raise FieldError(("name",), f"missing required field: one of {', '.join(_QUOTED)}")
    if name in DETERMINED_ONLY_SEARCHERS:
        raise FieldError(
            ("name",), f"Determined's {name!r} searcher is not available in det-lite; {_EXPECTED}"
        )
    if not isinstance(name, str) or name not in _BY_NAME:
        raise FieldError(("name",), f"{_EXPECTED}, got {describe(name)}")
    return _BY_NAME[name]


def _section(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Name checks and fields of other searchers first; then the union, its errors read without
    the union's tag (``searcher.max_trials``, not ``searcher.random.max_trials``)."""
    fields = _check_name(value).config.model_fields
    for key in value:
        if key in _ALL_FIELDS and key not in fields:
            raise FieldError(
                (key,), f"not a field of the {value['name']!r} searcher (its fields: {', '.join(fields)})"
            )
    try:
        return handler(value)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        err: Dict[str, Any] = dict(first, loc=("searcher",) + tuple(first["loc"])[1:])
        loc, message = translate(err)
        raise FieldError(loc[1:], message) from None


if TYPE_CHECKING:
    SearcherConfig = SearcherSection
else:  # pydantic's discriminated union of the registered sections, checked by _section
    SearcherConfig = Annotated[
        Annotated[Union[tuple(s.config for s in SEARCHERS)], Field(discriminator="name")],
        WrapValidator(_section),
    ]

_SECTION: TypeAdapter[SearcherSection] = TypeAdapter(SearcherConfig)


class _Experiment(ExperimentConfig):
    """The experiment config with the ``searcher`` section of a registered searcher."""

    searcher: SearcherConfig


def validate_config(raw: Mapping[str, Any], source: str = "<config>") -> ExperimentConfig:
    """Validate a parsed config; raise ConfigError naming ``source`` and the field."""
    return validate_experiment(_Experiment, raw, source)


def load_config(path: str, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read ``path`` (YAML), apply ``--config key.sub=value`` overrides (values read as YAML), validate."""
    return validate_config(read_config(path, overrides), source=path)


def validate_searcher(raw: Any, source: str = "<config>") -> SearcherSettings:
    """Validate a ``searcher`` section on its own (errors as in a whole config) -> its settings."""
    return validate_value(_SECTION.validate_python, raw, source, ("searcher",)).settings()
