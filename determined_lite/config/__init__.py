"""Experiment configuration: the ``experiment.yaml`` schema, typed settings and Determined's length units.

The schema is :class:`ExperimentConfig` with the ``searcher`` fields every searcher shares
(:class:`SearcherSection`); each searcher's own model lives beside it in
``determined_lite.searcher``, whose ``load_config`` / ``validate_config`` / ``validate_searcher``
validate with the union of them (built here by ``validate_experiment`` and ``validate_value``).
A validated config gives ``.to_dict()`` (the full config with Determined's defaults, what workers
receive as ``exp_conf``), ``.unused_fields`` (Determined fields accepted but not used locally)
and ``.training_settings()`` / ``.searcher_settings()`` (the typed :class:`TrainingSettings` /
:class:`SearcherSettings`); a bad one raises :class:`ConfigError` (one line: file, dotted field
path, what was expected). The settings classes read a validated config without checking it again.
``check_ddp_options`` checks DDP options given outside a config. Importing this package does not
import torch, and its parts load on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from determined_lite.config._base import NonNegativeInt, PositiveInt, check_known_keys
    from determined_lite.config._determined import DETERMINED_ONLY_SEARCHERS, unused_fields_warning
    from determined_lite.config._errors import ConfigError, FieldError, describe, first_error, translate
    from determined_lite.config._hparams import constant_values, iter_leaves, searched_paths
    from determined_lite.config._resources import check_ddp_options, parse_host
    from determined_lite.config._schema import (
        ExperimentConfig,
        environment_variables,
        new_experiment_seed,
        read_config,
        validate_experiment,
        validate_value,
    )
    from determined_lite.config._searcher import SearcherSection
    from determined_lite.config._settings import (
        DEFAULT_MAX_CONCURRENT_TRIALS,
        DEFAULT_REPORTING_PERIOD,
        DEFAULT_SCHEDULING_UNIT,
        DEFAULT_SMALLER_IS_BETTER,
        OWN_LENGTH,
        TEST_MODE_STEPS,
        TEST_MODE_VALIDATION_BATCHES,
        CheckpointPolicy,
        CompileSettings,
        ExperimentSettings,
        SearcherSettings,
        TrainingSettings,
    )
    from determined_lite.config.units import Batch, Epoch, Record, TrainUnit, length_from_config

# name -> the submodule that owns it. Imported on first use (PEP 562): a training worker reads
# only the settings and units, and the schema's pydantic models cost ~7 MB it does not need.
_OWNERS = {
    "unused_fields_warning": "_determined",
    "ConfigError": "_errors",
    "FieldError": "_errors",
    "describe": "_errors",
    "first_error": "_errors",
    "translate": "_errors",
    "constant_values": "_hparams",
    "iter_leaves": "_hparams",
    "searched_paths": "_hparams",
    "check_ddp_options": "_resources",
    "parse_host": "_resources",
    "NonNegativeInt": "_base",
    "check_known_keys": "_base",
    "PositiveInt": "_base",
    "DETERMINED_ONLY_SEARCHERS": "_determined",
    "ExperimentConfig": "_schema",
    "environment_variables": "_schema",
    "new_experiment_seed": "_schema",
    "read_config": "_schema",
    "validate_experiment": "_schema",
    "validate_value": "_schema",
    "SearcherSection": "_searcher",
    "DEFAULT_MAX_CONCURRENT_TRIALS": "_settings",
    "DEFAULT_REPORTING_PERIOD": "_settings",
    "DEFAULT_SCHEDULING_UNIT": "_settings",
    "DEFAULT_SMALLER_IS_BETTER": "_settings",
    "OWN_LENGTH": "_settings",
    "TEST_MODE_STEPS": "_settings",
    "TEST_MODE_VALIDATION_BATCHES": "_settings",
    "CheckpointPolicy": "_settings",
    "CompileSettings": "_settings",
    "ExperimentSettings": "_settings",
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


__all__ = [
    "Batch",
    "CheckpointPolicy",
    "CompileSettings",
    "ConfigError",
    "FieldError",
    "DEFAULT_MAX_CONCURRENT_TRIALS",
    "DEFAULT_REPORTING_PERIOD",
    "DEFAULT_SCHEDULING_UNIT",
    "DEFAULT_SMALLER_IS_BETTER",
    "DETERMINED_ONLY_SEARCHERS",
    "Epoch",
    "ExperimentConfig",
    "ExperimentSettings",
    "NonNegativeInt",
    "OWN_LENGTH",
    "PositiveInt",
    "Record",
    "SearcherSection",
    "SearcherSettings",
    "TEST_MODE_STEPS",
    "TEST_MODE_VALIDATION_BATCHES",
    "TrainUnit",
    "TrainingSettings",
    "check_ddp_options",
    "check_known_keys",
    "constant_values",
    "describe",
    "environment_variables",
    "first_error",
    "iter_leaves",
    "length_from_config",
    "new_experiment_seed",
    "parse_host",
    "read_config",
    "searched_paths",
    "translate",
    "unused_fields_warning",
    "validate_experiment",
    "validate_value",
]
