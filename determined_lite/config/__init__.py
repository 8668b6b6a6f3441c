"""Experiment configuration: the validated ``experiment.yaml`` schema and Determined's length units.

``load_config(path, overrides)`` reads and validates a config file; ``validate_config(raw)`` a
parsed mapping. Both return an :class:`ExperimentConfig` (``.to_dict()``: the full config with
Determined's defaults, what workers receive as ``exp_conf``; ``.unused_fields``: Determined
fields accepted but not used locally; ``.training_settings()`` / ``.searcher_settings()``: the
typed :class:`TrainingSettings` / :class:`SearcherSettings`) or raise :class:`ConfigError` (one
line: file, dotted field path, what was expected). ``validate_searcher`` checks a ``searcher``
section alone, ``check_ddp_options`` DDP options given outside a config. Importing this package
does not import torch, and its parts load on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from determined_lite.config._determined import unused_fields_warning
    from determined_lite.config._errors import ConfigError
    from determined_lite.config._hparams import constant_values, iter_leaves, searched_paths
    from determined_lite.config._resources import check_ddp_options, parse_host
    from determined_lite.config._schema import (
        SEARCHERS,
        ExperimentConfig,
        environment_variables,
        new_experiment_seed,
        validate_config,
        validate_searcher,
    )
    from determined_lite.config._settings import (
        DEFAULT_REPORTING_PERIOD,
        DEFAULT_SCHEDULING_UNIT,
        DEFAULT_SMALLER_IS_BETTER,
        CheckpointPolicy,
        CompileSettings,
        SearcherSettings,
        TrainingSettings,
    )
    from determined_lite.config.units import Batch, Epoch, Record, TrainUnit, length_from_config

# name -> the submodule that owns it. Imported on first use (PEP 562): a training worker reads
# only the settings and units, and the schema's pydantic models cost ~7 MB it does not need.
_OWNERS = {
    "unused_fields_warning": "_determined",
    "ConfigError": "_errors",
    "constant_values": "_hparams",
    "iter_leaves": "_hparams",
    "searched_paths": "_hparams",
    "check_ddp_options": "_resources",
    "parse_host": "_resources",
    "SEARCHERS": "_schema",
    "ExperimentConfig": "_schema",
    "environment_variables": "_schema",
    "new_experiment_seed": "_schema",
    "validate_config": "_schema",
    "validate_searcher": "_schema",
    "DEFAULT_REPORTING_PERIOD": "_settings",
    "DEFAULT_SCHEDULING_UNIT": "_settings",
    "DEFAULT_SMALLER_IS_BETTER": "_settings",
    "CheckpointPolicy": "_settings",
    "CompileSettings": "_settings",
    "SearcherSettings": "_settings",
    "TrainingSettings": "_settings",
    "Batch": "units",
    "Epoch": "units",
    "Record": "units",
    "TrainUnit": "units",
    "length_from_config": "units",
}


def __getattr__(name: str) -> Any:
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{owner}"), name)
    globals()[name] = value
    return value


def load_config(path: str, overrides: Sequence[str] = ()) -> "ExperimentConfig":
    """Read ``path`` (YAML), apply ``--config key.sub=value`` overrides (values read as YAML), validate."""
    from determined_lite.config._schema import validate_config
    from determined_lite.config._yaml import apply_overrides, read_yaml

    raw = apply_overrides(read_yaml(path), overrides)
    return validate_config(raw, source=path)


__all__ = [
    "Batch",
    "CheckpointPolicy",
    "CompileSettings",
    "ConfigError",
    "DEFAULT_REPORTING_PERIOD",
    "DEFAULT_SCHEDULING_UNIT",
    "DEFAULT_SMALLER_IS_BETTER",
    "Epoch",
    "ExperimentConfig",
    "Record",
    "SEARCHERS",
    "SearcherSettings",
    "TrainUnit",
    "TrainingSettings",
    "check_ddp_options",
    "constant_values",
    "environment_variables",
    "iter_leaves",
    "length_from_config",
    "load_config",
    "new_experiment_seed",
    "parse_host",
    "searched_paths",
    "unused_fields_warning",
    "validate_config",
    "validate_searcher",
]
