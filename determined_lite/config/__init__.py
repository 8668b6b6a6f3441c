"""Experiment configuration: the validated ``experiment.yaml`` schema and Determined's length units.

``load_config(path, overrides)`` reads and validates a config file; ``validate_config(raw)`` a
parsed mapping. Both return an :class:`ExperimentConfig` (``.to_dict()``: the full config with
Determined's defaults, what workers receive as ``exp_conf``; ``.unused_fields``: Determined
fields accepted but not used locally; ``.training_settings()`` / ``.searcher_settings()``: the
typed :class:`TrainingSettings` / :class:`SearcherSettings`) or raise :class:`ConfigError` (one
line: file, dotted field path, what was expected). ``validate_searcher`` checks a ``searcher``
section alone, ``check_ddp_options`` DDP options given outside a config. Importing this package
does not import torch.
"""

from typing import Sequence

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
from determined_lite.config._yaml import apply_overrides, read_yaml
from determined_lite.config.units import Batch, Epoch, Record, TrainUnit, length_from_config


def load_config(path: str, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read ``path`` (YAML), apply ``--config key.sub=value`` overrides (values read as YAML), validate."""
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
