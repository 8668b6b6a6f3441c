"""Reading experiment.yaml and applying ``--config key.sub=value`` overrides.

Two differences from plain ``yaml.safe_load``, both so that Determined configs mean the same here:

- ``1e-4`` and ``1.0e5`` are floats (YAML 1.2, which Determined's CLI reads); PyYAML's YAML 1.1
  rules would make them strings, a silent trap for learning rates.
- A key repeated in one mapping is an error naming its line; PyYAML keeps the last silently.

Nothing a config file can hold makes reading it hang or exhaust memory: the file must be a
regular file of at most ``MAX_CONFIG_BYTES`` (a FIFO or ``/dev/zero`` is refused before it is
opened), and a document whose aliases expand to more than ``MAX_VALUES`` values (a "billion
laughs" alias bomb) is refused before anything walks it.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any, Dict, Sequence

import yaml

from determined_lite.config._errors import ConfigError, describe


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 exponent floats and duplicate-key detection."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable key: the base class reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_VALUES = 100_000


def _expanded_size(value: Any, limit: int) -> int:
    """How many values ``value`` holds once its shared (aliased) parts are counted at every use;
    stops counting past ``limit``. Memoised per object, so an alias bomb costs its node count."""
    sizes: Dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = limit + 1  # a cycle (a recursive alias) counts as too large
        items = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        total = 1
        for item in items:
            total += size(item)
            if total > limit:
                break
        sizes[id(node)] = min(total, limit + 1)
        return sizes[id(node)]

    return size(value)


def _yaml_error(e: yaml.YAMLError, source: str) -> ConfigError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    if mark is None:
        return ConfigError(f"invalid YAML: {problem}", source=source)
    line = mark.line + 1
    return ConfigError(
        f"invalid YAML at line {line}, column {mark.column + 1}: {problem}", source=source, line=line
    )


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text with the loader above; syntax errors become a ConfigError with the line."""
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as e:
        raise _yaml_error(e, source) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", source=source) from None
    if _expanded_size(value, MAX_VALUES) > MAX_VALUES:
        raise ConfigError(
            f"the YAML expands to more than {MAX_VALUES} values through its aliases (&name / *name)",
            source=source,
        )
    return value


def read_yaml(path: str) -> Dict[str, Any]:
    """Read the experiment config file: a mapping at the top level."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("not a regular file; expected an experiment config (YAML) file", source=path)
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"the file is {info.st_size} bytes; an experiment config is at most {MAX_CONFIG_BYTES}",
                source=path,
            )
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read the config file: {e.strerror or e}", source=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not a UTF-8 text file ({e.reason} at byte {e.start})", source=path) from None
    raw = parse_yaml(text, path)
    if raw is None:
        raise ConfigError("the file is empty; expected an experiment config mapping", source=path)
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping at the top level, got {describe(raw)}", source=path)
    return raw


def apply_overrides(raw: Dict[str, Any], overrides: Sequence[str]) -> Dict[str, Any]:
    """Set ``key.sub=value`` (value read as YAML) in ``raw``, in order; returns ``raw``.

    Missing intermediate mappings are created; list elements cannot be addressed.
    """
    for item in overrides:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not key or any(not p for p in parts):
            raise ConfigError(
                f"expected KEY=VALUE with a dotted KEY (e.g. searcher.max_trials=8), got {item!r}",
                source="--config",
            )
        try:
            value = yaml.load(text, Loader=_Loader)  # noqa: S506
        except yaml.YAMLError as e:
            raise ConfigError(
                f"invalid YAML value {text!r}: {getattr(e, 'problem', None) or e}",
                path=key,
                source="--config",
            ) from None
        if _expanded_size(value, MAX_VALUES) > MAX_VALUES:
            message = f"the value expands to more than {MAX_VALUES} values"
            raise ConfigError(message, path=key, source="--config")
        _set_path(raw, parts, value, key)
    return raw


# Determined's length units: ``{batches|epochs|records: n}`` holds exactly one of them.
_LENGTH_UNITS = frozenset({"batches", "epochs", "records"})


def _set_path(raw: Dict[str, Any], parts: Sequence[str], value: Any, key: str) -> None:
    """Set ``raw[parts[0]][parts[1]]... = value``, creating missing mappings. Setting a length's
    unit (``searcher.max_length.batches=1`` on ``{epochs: 3}``) replaces the unit, since a length
    holds one unit only."""
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            parent = ".".join(parts[: i + 1])
            raise ConfigError(
                f"cannot set {key}: {parent} is {describe(child)}, not a mapping",
                path=key,
                source="--config",
            )
        node = child
    if parts[-1] in _LENGTH_UNITS and node and set(node) <= _LENGTH_UNITS:
        node.clear()
    node[parts[-1]] = value
