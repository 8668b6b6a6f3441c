"""Experiment config schema: Determined's defaults, normal forms, and one clear error per bad field."""

from __future__ import annotations

import copy
import datetime
import glob
import json
import os
import subprocess
import sys
from typing import Any, Dict

import pytest

from determined_lite.config import (
    ConfigError,
    ExperimentConfig,
    constant_values,
    environment_variables,
    iter_leaves,
    parse_host,
    unused_fields_warning,
)
from determined_lite.searcher import load_config, validate_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MINIMAL: Dict[str, Any] = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 100}},
    "reproducibility": {"experiment_seed": 1},
}

DELETE = object()


def config_with(changes: Dict[str, Any], base: Dict[str, Any] = MINIMAL) -> Dict[str, Any]:
    """A copy of ``base`` with dotted keys set (DELETE removes the key)."""
    raw = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return raw


def write(tmp_path, text: str, name: str = "experiment.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- valid configs --------------------------------------------------------------------------------


def test_defaults_are_determineds():
    conf = validate_config(MINIMAL).to_dict()
    assert conf == {
        "name": None,
        "description": None,
        "entrypoint": "model_def:MyTrial",
        "hyperparameters": {"global_batch_size": {"type": "const", "val": 32}},
        "searcher": {
            "name": "single",
            "metric": "val_loss",
            "smaller_is_better": True,
            "max_length": {"batches": 100},
            "source_trial_id": None,
            "source_checkpoint_uuid": None,
        },
        "records_per_epoch": 0,
        "min_validation_period": None,
        "min_checkpoint_period": None,
        "scheduling_unit": 100,
        "perform_initial_validation": False,
        "checkpoint_policy": "best",
        "max_restarts": 5,
        "resources": {
            "slots_per_trial": 1,
            "distributed_backend": "horovod",
            "hosts": None,
            "executor": "local",
            "ddp_options": {
                "find_unused_parameters": False,
                "broadcast_buffers": True,
                "gradient_as_bucket_view": False,
                "bucket_cap_mb": 25.0,
                "static_graph": False,
            },
            "ray": {
                "address": None,
                "placement": "pack",
                "resources_per_slot": {"CPU": 1.0},
                "placement_timeout": 600.0,
            },
            "launcher": None,
        },
        "optimizations": {
            "aggregation_frequency": 1,
            "average_aggregated_gradients": True,
            "average_training_metrics": True,
            # det-lite's own (issue 14): torch.compile off unless asked for
            "compile": {
                "enabled": False,
                "mode": None,
                "backend": "inductor",
                "fullgraph": False,
                "dynamic": False,
                "retrace_every_iteration": False,
            },
        },
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": None,
            "storage_path": None,
            "save_trial_best": 1,
            "save_trial_latest": 1,
            "save_experiment_best": 0,
        },
        "reproducibility": {"experiment_seed": 1},
        "environment": {"environment_variables": {"cpu": [], "cuda": [], "rocm": []}},
        "profiling": {"enabled": False, "begin_on_batch": 0, "end_after_batch": None},
        "det_lite": {"callback_modules": []},
        "data": {},
    }
    json.dumps(conf)  # plain JSON


@pytest.mark.parametrize(
    "name, extra, expected",
    [
        ("grid", {}, {"max_concurrent_trials": 16}),
        ("random", {"max_trials": 8}, {"max_trials": 8, "max_concurrent_trials": 16}),
        (
            "adaptive_asha",
            {"max_trials": 8},
            {"max_trials": 8, "max_concurrent_trials": 0, "divisor": 4, "max_rungs": 5, "mode": "standard"},
        ),
    ],
)
def test_searcher_defaults_per_searcher(name, extra, expected):
    raw = config_with({"searcher.name": name, **{f"searcher.{k}": v for k, v in extra.items()}})
    searcher = validate_config(raw).to_dict()["searcher"]
    common = {
        "name",
        "metric",
        "smaller_is_better",
        "max_length",
        "source_trial_id",
        "source_checkpoint_uuid",
    }
    assert set(searcher) == common | set(expected)
    assert {k: searcher[k] for k in expected} == expected


def test_root_experiment_yaml_validates_unchanged():
    config = load_config(os.path.join(REPO, "experiment.yaml"))
    conf = config.to_dict()
    assert config.unused_fields == []
    assert conf["entrypoint"] == "examples.digits.model_def:DigitsTrial"
    assert conf["hyperparameters"]["global_batch_size"] == {"type": "const", "val": 64}
    assert conf["hyperparameters"]["lr"] == {"type": "const", "val": 0.01}
    assert conf["searcher"]["max_length"] == {"epochs": 15}
    assert conf["searcher"]["smaller_is_better"] is False
    assert conf["min_validation_period"] == {"epochs": 1}
    assert conf["min_checkpoint_period"] == {"epochs": 5}
    assert conf["records_per_epoch"] == 1437
    assert conf["reproducibility"]["experiment_seed"] == 42


def test_digits_example_trial_runs_from_the_root_config():
    # examples/digits has no yaml of its own: its README and train.py use the root experiment.yaml.
    assert not glob.glob(os.path.join(REPO, "examples", "digits", "*.yaml"))
    entry = load_config(os.path.join(REPO, "experiment.yaml")).to_dict()["entrypoint"]
    assert os.path.exists(os.path.join(REPO, *entry.split(":")[0].split(".")) + ".py")


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for p in glob.glob(os.path.join(REPO, "examples", "**", "*.yaml"), recursive=True)
        + glob.glob(os.path.join(REPO, "tests", "fixtures", "experiments", "**", "*.yaml"), recursive=True)
        # fixtures that are broken on purpose (for CLI error tests) say so in their name
        if not any(word in os.path.basename(p) for word in ("bad", "broken", "invalid"))
    )
    or [None],
)
def test_shipped_configs_validate(path):
    if path is None:
        pytest.skip("no yaml configs under examples/ or tests/fixtures/")
    load_config(path)


def test_to_dict_is_valid_input_and_a_fixed_point():
    raw = config_with(
        {
            "searcher.name": "adaptive_asha",
            "searcher.max_trials": 16,
            "hyperparameters.lr": {"type": "log", "minval": -4, "maxval": -1},
            "hyperparameters.model": {"width": {"type": "int", "minval": 8, "maxval": 64}, "act": "relu"},
            "environment.environment_variables": ["A=1"],
            "checkpoint_storage": {"host_path": "/tmp/ckpts", "storage_path": "exp"},
            "resources": {"slots_per_trial": 2, "hosts": ["localhost:2"], "distributed_backend": "torch"},
            "min_validation_period": {"records": 640},
        }
    )
    first = validate_config(raw).to_dict()
    assert validate_config(first).to_dict() == first


def test_experiment_seed_is_drawn_once_and_kept():
    raw = config_with({"reproducibility": DELETE})
    a = validate_config(raw).to_dict()["reproducibility"]["experiment_seed"]
    b = validate_config(raw).to_dict()["reproducibility"]["experiment_seed"]
    assert 0 <= a < 2**31 and 0 <= b < 2**31
    assert a != b  # fresh per experiment (chance of a collision: 2**-31)
    conf = validate_config(raw).to_dict()
    assert validate_config(conf).to_dict()["reproducibility"] == conf["reproducibility"]


def test_hyperparameter_normal_form():
    raw = config_with(
        {
            "hyperparameters": {
                "global_batch_size": {"type": "categorical", "vals": [16, 32]},
                "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 2, "count": 4},
                "dropout": {"type": "double", "minval": 0, "maxval": 0.5},
                "layers": [64, 32],
                "optimizer": {"type": "const", "val": {"type": "adam", "betas": [0.9, 0.99]}},
                "model": {"width": {"type": "int", "minval": 8, "maxval": 64, "count": 3}, "act": "relu"},
                "nothing": None,
                "empty_group": {},
            }
        }
    )
    hp = validate_config(raw).hyperparameters
    assert hp == {
        "global_batch_size": {"type": "categorical", "vals": [16, 32]},
        "lr": {"type": "log", "minval": -4.0, "maxval": -1.0, "base": 2.0, "count": 4},
        "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5, "count": None},
        "layers": {"type": "const", "val": [64, 32]},
        "optimizer": {"type": "const", "val": {"type": "adam", "betas": [0.9, 0.99]}},
        "model": {
            "width": {"type": "int", "minval": 8, "maxval": 64, "count": 3},
            "act": {"type": "const", "val": "relu"},
        },
        "nothing": {"type": "const", "val": None},
        "empty_group": {},
    }
    assert (
        hp["lr"]["base"] == 2.0
        and validate_config(
            config_with({"hyperparameters.x": {"type": "log", "minval": 0, "maxval": 1}})
        ).hyperparameters["x"]["base"]
        == 10.0
    )
    assert [loc for loc, _ in iter_leaves(hp)] == [
        ("global_batch_size",),
        ("lr",),
        ("dropout",),
        ("layers",),
        ("optimizer",),
        ("model", "width"),
        ("model", "act"),
        ("nothing",),
    ]


def test_constant_values_of_a_fixed_config():
    hp = validate_config(
        config_with({"hyperparameters.model": {"width": 8, "acts": ["relu"]}, "hyperparameters.lr": 0.1})
    ).hyperparameters
    assert constant_values(hp) == {
        "global_batch_size": 32,
        "model": {"width": 8, "acts": ["relu"]},
        "lr": 0.1,
    }
    searchable = validate_config(
        config_with({"hyperparameters.model": {"width": {"type": "int", "minval": 8, "maxval": 64}}})
    ).hyperparameters
    with pytest.raises(ValueError, match=r"^hyperparameters\.model\.width: type 'int' needs a searcher"):
        constant_values(searchable)


def test_lengths_bare_int_and_zero_periods():
    conf = validate_config(
        config_with(
            {
                "searcher.max_length": 500,
                "min_validation_period": {"batches": 0},
                "min_checkpoint_period": {"epochs": 2},
            }
        )
    ).to_dict()
    assert conf["searcher"]["max_length"] == {"batches": 500}
    assert conf["min_validation_period"] is None
    assert conf["min_checkpoint_period"] == {"epochs": 2}


def test_epochs_need_no_records_per_epoch():
    conf = validate_config(config_with({"searcher.max_length": {"epochs": 3}})).to_dict()
    assert conf["records_per_epoch"] == 0 and conf["searcher"]["max_length"] == {"epochs": 3}


def test_nulls_mean_defaults():
    conf = validate_config(
        config_with({"scheduling_unit": None, "searcher.smaller_is_better": None, "optimizations": None})
    ).to_dict()
    assert conf["scheduling_unit"] == 100
    assert conf["searcher"]["smaller_is_better"] is True
    assert conf["optimizations"]["aggregation_frequency"] == 1


def test_resources_hosts_and_slots():
    conf = validate_config(
        config_with(
            {
                "hyperparameters.global_batch_size": 30,
                "resources": {
                    "slots_per_trial": 3,
                    "hosts": ["node-a:2", "10.0.0.2:1"],
                    "distributed_backend": "torch",
                },
                "resources.ddp_options": {"find_unused_parameters": True, "bucket_cap_mb": 10},
            }
        )
    ).to_dict()["resources"]
    assert conf["hosts"] == ["node-a:2", "10.0.0.2:1"]
    assert conf["ddp_options"]["find_unused_parameters"] is True
    assert conf["ddp_options"]["bucket_cap_mb"] == 10.0
    assert parse_host("node-a:2") == ("node-a", 2)
    # Determined's slots_per_trial: 0 (one process, no GPU) is one slot here.
    assert validate_config(config_with({"resources.slots_per_trial": 0})).resources.slots_per_trial == 1


def test_environment_variables_forms():
    listed = validate_config(config_with({"environment.environment_variables": ["A=1", "B=x=y"]})).to_dict()
    assert listed["environment"]["environment_variables"] == {
        "cpu": ["A=1", "B=x=y"],
        "cuda": ["A=1", "B=x=y"],
        "rocm": ["A=1", "B=x=y"],
    }
    assert environment_variables(listed, "cuda") == {"A": "1", "B": "x=y"}
    mapped = validate_config(
        config_with({"environment.environment_variables": {"cpu": ["C=1"], "gpu": ["G=1"], "cuda": ["K=2"]}})
    ).to_dict()
    assert mapped["environment"]["environment_variables"] == {
        "cpu": ["C=1"],
        "cuda": ["G=1", "K=2"],
        "rocm": [],
    }
    assert environment_variables(mapped) == {"C": "1"}


def test_checkpoint_storage_paths(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    storage = validate_config(
        config_with({"checkpoint_storage": {"host_path": "~/ckpt/", "storage_path": "a/b"}})
    )
    assert storage.to_dict()["checkpoint_storage"]["host_path"] == "/home/someone/ckpt"
    assert storage.to_dict()["checkpoint_storage"]["storage_path"] == "a/b"


# --- Determined fields det-lite does not use -------------------------------------------------------


def test_unused_determined_fields_are_accepted_and_listed():
    raw = config_with(
        {
            "labels": ["a"],
            "workspace": "ws",
            "project": "p",
            "debug": False,
            "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
            "environment": {"image": "determinedai/env:tag", "environment_variables": ["A=1"]},
            "resources": {"resource_pool": "gpu", "priority": 42, "max_slots": 4, "slots_per_trial": 1},
            "optimizations": {"mixed_precision": "O1", "aggregation_frequency": 2},
            "profiling": {"enabled": True, "sync_timings": False},
            "searcher.name": "adaptive_asha",
            "searcher.max_trials": 4,
            "searcher.bracket_rungs": [1, 2],
            "min_checkpoint_period": None,
        }
    )
    config = validate_config(raw, "exp.yaml")
    assert config.unused_fields == [
        "labels",
        "workspace",
        "project",
        "debug",
        "bind_mounts",
        "environment.image",
        "resources.resource_pool",
        "resources.priority",
        "resources.max_slots",
        "optimizations.mixed_precision",
        "searcher.bracket_rungs",
        "profiling.sync_timings",
    ]
    assert config.to_dict()["optimizations"]["aggregation_frequency"] == 2
    assert config.to_dict()["profiling"] == {"enabled": True, "begin_on_batch": 0, "end_after_batch": None}
    assert "image" not in config.to_dict()["environment"]
    assert unused_fields_warning(config.unused_fields, "exp.yaml") == (
        "exp.yaml: ignoring Determined fields that det-lite does not use locally: "
        + ", ".join(config.unused_fields)
    )
    assert unused_fields_warning([], "exp.yaml") == ""


def test_cloud_checkpoint_storage_keeps_its_fields():
    raw = config_with(
        {"checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "k", "save_trial_best": 3}}
    )
    config = validate_config(raw, "exp.yaml")
    assert config.unused_fields == []
    storage = config.to_dict()["checkpoint_storage"]
    assert storage == {
        "type": "s3",
        "bucket": "b",
        "prefix": None,
        "access_key": "k",
        "secret_key": None,
        "endpoint_url": None,
        "save_trial_best": 3,
        "save_trial_latest": 1,
        "save_experiment_best": 0,
    }


@pytest.mark.parametrize(
    "storage, message",
    [
        ({"type": "s3"}, "checkpoint_storage.bucket: required for type 's3'"),
        (
            {"type": "gcs", "bucket": "b", "host_path": "/x"},
            "checkpoint_storage.host_path: not a field of type 'gcs'",
        ),
        ({"type": "azure", "container": "c"}, "checkpoint_storage.connection_string: type 'azure' needs"),
        ({"type": "directory"}, "checkpoint_storage.container_path: required for type 'directory'"),
        ({"type": "nfs"}, "checkpoint_storage.type: expected one of 'shared_fs'"),
    ],
)
def test_checkpoint_storage_fields_are_checked_per_type(storage, message):
    with pytest.raises(ConfigError) as e:
        validate_config(config_with({"checkpoint_storage": storage}), "exp.yaml")
    assert str(e.value).startswith(f"exp.yaml: {message}")


def test_unknown_field_is_an_error_with_a_suggestion():
    with pytest.raises(ConfigError) as e:
        validate_config(config_with({"searcher.max_lenght": 10}), "experiment.yaml")
    assert str(e.value) == "experiment.yaml: searcher.max_lenght: unknown field (did you mean 'max_length'?)"
    assert e.value.path == "searcher.max_lenght"
    assert e.value.message == "unknown field (did you mean 'max_length'?)"


MNIST_CONST = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "fixtures/determined_038/examples/tutorials/mnist_pytorch/const.yaml",
)


GBS = "the batch size summed over all slots (per-slot batch = global_batch_size / slots_per_trial)"


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"  name: single": "  nàme: single"}, "searcher.nàme: unknown field (did you mean 'name'?)"),
        ({"  name: single": "  nme: single"}, "searcher.nme: unknown field (did you mean 'name'?)"),
        (
            {"  name: single": "  name: single\n  nàme: x"},
            "searcher.nàme: unknown field (did you mean 'name'?)",
        ),
        (
            {"hyperparameters:": "hyperparametérs:"},
            "hyperparametérs: unknown field (did you mean 'hyperparameters'?)",
        ),
        (
            {
                "  learning_rate: 1.0": "  learning_rate: 1.0\n  global_batch_sizé: 32",
                "python3 train.py --epochs 1": "model_def:Trial",  # a trial class needs the batch size
            },
            "hyperparameters.global_batch_sizé: did you mean 'global_batch_size', a required "
            f"hyperparameter: {GBS}",
        ),
    ],
)
def test_a_misspelt_key_is_named_not_reported_missing(tmp_path, changes, line):
    """Issue 40: a key with a non-ASCII letter (Determined's tutorial config, one key changed)
    is named with the closest field, as an ASCII typo is; a misspelt searcher ``name`` is that
    key, not "searcher.name: missing required field"."""
    with open(MNIST_CONST, encoding="utf-8") as f:
        text = f.read()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new, 1)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: {line}"


def test_error_is_one_line_without_pydantic_dump():
    with pytest.raises(ConfigError) as e:
        validate_config(config_with({"searcher.max_length": {"steps": 10}}), "experiment.yaml")
    assert str(e.value) == (
        "experiment.yaml: searcher.max_length: "
        "expected {batches|records|epochs: positive int}, got {'steps': 10}"
    )
    assert "\n" not in str(e.value) and "pydantic" not in str(e.value)
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert isinstance(e.value, ValueError)


# --- broken configs: the exact field path of the first error ---------------------------------------

GRID = {"searcher.name": "grid"}
BROKEN = [
    # (changes, path, words in the message)
    ({"entrypoint": DELETE}, "entrypoint", "missing required field"),
    ({"entrypoint": "model_def.MyTrial"}, "entrypoint", "expected 'package.module:TrialClass'"),
    ({"entrypoint": ["torchrun", "train.py"]}, "entrypoint", "expected 'package.module:TrialClass'"),
    ({"name": 5}, "name", "expected a string, got 5"),
    ({"searcher": DELETE}, "searcher", "missing required section"),
    ({"searcher": "single"}, "searcher", "expected a mapping, got 'single'"),
    ({"searcher.metric": DELETE}, "searcher.metric", "missing required field"),
    ({"searcher.metric": ""}, "searcher.metric", "expected the name of a validation metric"),
    ({"searcher.name": DELETE}, "searcher.name", "missing required field"),
    (
        {"searcher.name": "bayesian"},
        "searcher.name",
        "expected 'single', 'grid', 'random' or 'adaptive_asha'",
    ),
    ({"searcher.name": "pbt"}, "searcher.name", "Determined's 'pbt' searcher is not available in det-lite"),
    ({"searcher.max_length": DELETE}, "searcher.max_length", "the searcher needs a length: max_length"),
    ({"searcher.max_length": {"batches": 0}}, "searcher.max_length", "positive int}, got {'batches': 0}"),
    ({"searcher.max_length": {"batches": 5, "epochs": 1}}, "searcher.max_length", "expected {batches|"),
    ({"searcher.max_length": "100"}, "searcher.max_length", "got '100'"),
    ({"searcher.max_length": True}, "searcher.max_length", "got True"),
    (
        {"searcher.smaller_is_better": "yes"},
        "searcher.smaller_is_better",
        "expected true or false, got 'yes'",
    ),
    ({"searcher.max_trials": 4}, "searcher.max_trials", "not a field of the 'single' searcher"),
    ({"searcher.name": "random"}, "searcher.max_trials", "the 'random' searcher needs max_trials"),
    (
        {"searcher.name": "adaptive_asha"},
        "searcher.max_trials",
        "the 'adaptive_asha' searcher needs max_trials",
    ),
    (
        {"searcher.name": "random", "searcher.max_trials": 0},
        "searcher.max_trials",
        "expected a value >= 1, got 0",
    ),
    ({"searcher.name": "grid", "searcher.max_trials": 3}, "searcher.max_trials", "not a field of the 'grid'"),
    (
        {"searcher.name": "random", "searcher.max_trials": 2, "searcher.divisor": 3},
        "searcher.divisor",
        "not a field",
    ),
    (
        {"searcher.name": "adaptive_asha", "searcher.max_trials": 2, "searcher.mode": "fast"},
        "searcher.mode",
        "expected 'aggressive', 'standard' or 'conservative', got 'fast'",
    ),
    (
        {"searcher.name": "adaptive_asha", "searcher.max_trials": 2, "searcher.divisor": 1},
        "searcher.divisor",
        "expected a value > 1, got 1",
    ),
    ({"searcher.source_trial_id": "7"}, "searcher.source_trial_id", "expected an integer, got '7'"),
    # The section is optional (Determined >= 0.38 scripts need none); a class trial still needs
    # its global batch size, and the error names that field.
    ({"hyperparameters": DELETE}, "hyperparameters.global_batch_size", "missing required hyperparameter"),
    ({"hyperparameters": [1, 2]}, "hyperparameters", "expected a mapping of hyperparameter names"),
    ({"hyperparameters.global_batch_size": DELETE}, "hyperparameters.global_batch_size", "missing required"),
    (
        {"hyperparameters.global_batch_size": 0},
        "hyperparameters.global_batch_size",
        "expected a positive int, got 0",
    ),
    ({"hyperparameters.global_batch_size": 32.0}, "hyperparameters.global_batch_size", "got 32.0"),
    (
        {"hyperparameters.global_batch_size": {"type": "double", "minval": 1, "maxval": 8}},
        "hyperparameters.global_batch_size",
        "expected a positive int (or an int or categorical",
    ),
    (
        {"hyperparameters.global_batch_size": {"type": "int", "minval": 0, "maxval": 8}},
        "hyperparameters.global_batch_size.minval",
        "expected a positive int, got 0",
    ),
    (
        {"hyperparameters.global_batch_size": 30, "resources.slots_per_trial": 4},
        "hyperparameters.global_batch_size",
        "30 is not divisible by resources.slots_per_trial (4)",
    ),
    (
        {
            "hyperparameters.global_batch_size": {"type": "categorical", "vals": [8, 6]},
            "resources.slots_per_trial": 4,
        },
        "hyperparameters.global_batch_size.vals[1]",
        "6 is not divisible",
    ),
    (
        {"hyperparameters.x": {"type": "categorical", "vals": []}},
        "hyperparameters.x.vals",
        "must not be empty",
    ),
    ({"hyperparameters.x": {"type": "categorical"}}, "hyperparameters.x.vals", "missing required field"),
    (
        {"hyperparameters.x": {"type": "categorical", "vals": [1, datetime.date(2024, 1, 2)]}},
        "hyperparameters.x.vals[1]",
        "expected a JSON value",
    ),
    (
        {"hyperparameters.x": {"type": "float", "minval": 0}},
        "hyperparameters.x.type",
        "expected 'const', 'int'",
    ),
    ({"hyperparameters.x": {"type": "adam", "lr": 1}}, "hyperparameters.x.type", "{type: const, val: {...}}"),
    ({"hyperparameters.x": {"type": "const"}}, "hyperparameters.x.val", "missing required field"),
    (
        {"hyperparameters.x": {"type": "int", "minval": 1, "maxval": 1}},
        "hyperparameters.x.maxval",
        "greater than minval",
    ),
    (
        {"hyperparameters.x": {"type": "int", "minval": 1.5, "maxval": 3}},
        "hyperparameters.x.minval",
        "expected an integer, got 1.5",
    ),
    (
        {"hyperparameters.x": {"type": "double", "minval": 0, "maxvalue": 1}},
        "hyperparameters.x.maxvalue",
        "did you mean 'maxval'",
    ),
    (
        {"hyperparameters.x": {"type": "double", "minval": 0, "maxval": "1"}},
        "hyperparameters.x.maxval",
        "expected a number, got '1'",
    ),
    (
        {"hyperparameters.x": {"type": "double", "minval": 0, "maxval": 1, "count": 0}},
        "hyperparameters.x.count",
        ">= 1",
    ),
    (
        {"hyperparameters.x": {"type": "log", "minval": -3, "maxval": 0, "base": 1}},
        "hyperparameters.x.base",
        "other than 1",
    ),
    (
        {"hyperparameters.x": {"type": "log", "minval": -3, "maxval": 0, "base": -2}},
        "hyperparameters.x.base",
        "> 0",
    ),
    (
        {"hyperparameters.m": {"deep": {"type": "int", "minval": 3}}},
        "hyperparameters.m.deep.maxval",
        "missing required",
    ),
    ({"hyperparameters.m": {1: 2}}, "hyperparameters.m", "names must be non-empty strings"),
    (
        {**GRID, "hyperparameters.x": {"type": "int", "minval": 1, "maxval": 4}},
        "hyperparameters.x.count",
        "grid searcher needs count",
    ),
    (
        {**GRID, "hyperparameters.m": {"lr": {"type": "log", "minval": -3, "maxval": 0}}},
        "hyperparameters.m.lr.count",
        "grid searcher needs count",
    ),
    ({"records_per_epoch": -1}, "records_per_epoch", "expected a value >= 0, got -1"),
    (
        {"min_validation_period": 5},
        "min_validation_period",
        "expected {batches|records|epochs: int >= 0}, got 5",
    ),
    ({"min_checkpoint_period": {"batch": 5}}, "min_checkpoint_period", "got {'batch': 5}"),
    ({"scheduling_unit": 0}, "scheduling_unit", "expected a value >= 1, got 0"),
    ({"scheduling_unit": "100"}, "scheduling_unit", "expected an integer, got '100'"),
    ({"perform_initial_validation": 1}, "perform_initial_validation", "expected true or false, got 1"),
    ({"checkpoint_policy": "latest"}, "checkpoint_policy", "expected 'best', 'all' or 'none', got 'latest'"),
    ({"max_restarts": -1}, "max_restarts", "expected a value >= 0, got -1"),
    ({"resources.slots_per_trial": True}, "resources.slots_per_trial", "expected an integer, got True"),
    (
        {"resources.distributed_backend": "nccl"},
        "resources.distributed_backend",
        "expected 'horovod' or 'torch'",
    ),
    ({"resources.hosts": ["a:1", "b"]}, "resources.hosts[1]", "expected 'host:slots'"),
    (
        {"resources.hosts": ["a:1", "a:1"], "resources.slots_per_trial": 2},
        "resources.hosts[1]",
        "already listed",
    ),
    ({"resources.hosts": ["a:2", "b:2"]}, "resources.hosts", "slots add up to 4, but slots_per_trial is 1"),
    (
        {"resources.ddp_options": {"static_graph": "yes"}},
        "resources.ddp_options.static_graph",
        "true or false",
    ),
    (
        {"resources.ddp_options": {"bucket_mb": 5}},
        "resources.ddp_options.bucket_mb",
        "did you mean 'bucket_cap_mb'",
    ),
    ({"resources.gpus": 2}, "resources.gpus", "unknown field"),
    ({"optimizations.aggregation_frequency": 0}, "optimizations.aggregation_frequency", ">= 1, got 0"),
    (
        {"optimizations.aggregation_frequency": 2.0},
        "optimizations.aggregation_frequency",
        "expected an integer",
    ),
    (
        {"optimizations.average_aggregated_gradients": "no"},
        "optimizations.average_aggregated_gradients",
        "true or false",
    ),
    (
        {"checkpoint_storage.type": "ftp"},
        "checkpoint_storage.type",
        "expected one of 'shared_fs', 'directory', 's3'",
    ),
    ({"checkpoint_storage.host_path": "ckpts"}, "checkpoint_storage.host_path", "expected an absolute path"),
    (
        {"checkpoint_storage.storage_path": "x"},
        "checkpoint_storage.host_path",
        "required when storage_path is set",
    ),
    (
        {"checkpoint_storage.host_path": "/tmp/a", "checkpoint_storage.storage_path": "../b"},
        "checkpoint_storage.storage_path",
        "subdirectory of host_path",
    ),
    ({"checkpoint_storage.save_trial_best": -1}, "checkpoint_storage.save_trial_best", ">= 0"),
    ({"reproducibility.experiment_seed": -5}, "reproducibility.experiment_seed", ">= 0, got -5"),
    ({"reproducibility.experiment_seed": 2**32}, "reproducibility.experiment_seed", "<= 4294967295"),
    ({"reproducibility.seed": 1}, "reproducibility.seed", "did you mean 'experiment_seed'"),
    (
        {"environment.environment_variables": ["A=1", "B"]},
        "environment.environment_variables[1]",
        "'KEY=VALUE'",
    ),
    (
        {"environment.environment_variables": {"cpu": ["=1"]}},
        "environment.environment_variables.cpu[0]",
        "'KEY=VALUE'",
    ),
    (
        {"environment.environment_variables": {"tpu": []}},
        "environment.environment_variables.tpu",
        "unknown field",
    ),
    ({"environment.environment_variables": "A=1"}, "environment.environment_variables", "expected a list"),
    ({"environment.python": "3.11"}, "environment.python", "unknown field"),
    (
        {"profiling": {"enabled": True, "begin_on_batch": 5, "end_after_batch": 2}},
        "profiling.end_after_batch",
        "must be >= begin_on_batch (5), got 2",
    ),
    ({"profiling.begin_on_batch": -1}, "profiling.begin_on_batch", ">= 0"),
    ({"profiling.enabled": "yes"}, "profiling.enabled", "expected true or false"),
    ({"det_lite.callback_modules": "cbs"}, "det_lite.callback_modules", "expected a list of Python module"),
    ({"det_lite.callback_modules": ["ok", "my-cbs"]}, "det_lite.callback_modules[1]", "got 'my-cbs'"),
    ({"det_lite.callback_modules": ["cbs:Early"]}, "det_lite.callback_modules[0]", "'pkg.callbacks'"),
    ({"det_lite.callbacks": ["cbs"]}, "det_lite.callbacks", "did you mean 'callback_modules'"),
    ({"data": [1]}, "data", "expected a mapping, got [1]"),
    ({"data": {"when": datetime.date(2024, 1, 2)}}, "data.when", "quote it to make it a string"),
    ({"bogus": 1}, "bogus", "unknown field; experiment config fields are: name, description, entrypoint"),
    ({"hyperparameter": {}}, "hyperparameter", "did you mean 'hyperparameters'"),
]


@pytest.mark.parametrize("changes, path, words", BROKEN, ids=[b[1] + ":" + b[2][:30] for b in BROKEN])
def test_broken_config_names_the_field(changes, path, words):
    with pytest.raises(ConfigError) as e:
        validate_config(config_with(changes), "experiment.yaml")
    assert e.value.path == path, str(e.value)
    assert words in e.value.message, str(e.value)
    assert str(e.value) == f"experiment.yaml: {path}: {e.value.message}"
    assert "\n" not in str(e.value)


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError) as e:
        validate_config([1], "x.yaml")  # type: ignore[arg-type]
    assert str(e.value) == "x.yaml: expected a mapping at the top level, got [1]"


# --- files, YAML and overrides ---------------------------------------------------------------------

GOOD_YAML = """\
entrypoint: model_def:MyTrial
hyperparameters:
  global_batch_size: 16
  lr: 1e-4
  wd: 5.0e-5
  steps: 1_000
searcher:
  name: single
  metric: val_loss
  max_length:
    batches: 10
"""


def test_yaml_exponent_floats_are_numbers(tmp_path):
    hp = load_config(write(tmp_path, GOOD_YAML)).hyperparameters
    assert hp["lr"] == {"type": "const", "val": 0.0001}
    assert hp["wd"] == {"type": "const", "val": 5e-05}
    assert hp["steps"] == {"type": "const", "val": 1000}


def test_bad_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, GOOD_YAML.replace("  metric: val_loss", "  metric: val_loss\n   oops: 1"))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 10
    assert str(e.value).startswith(f"{path}: invalid YAML at line 10, column 8: ")


def test_duplicate_yaml_key_is_an_error(tmp_path):
    path = write(tmp_path, GOOD_YAML + "searcher:\n  name: grid\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 12
    assert "found duplicate key 'searcher'" in str(e.value)


@pytest.mark.parametrize(
    "text, words",
    [("", "the file is empty"), ("- 1\n- 2\n", "expected a mapping at the top level, got [1, 2]")],
)
def test_empty_or_non_mapping_file(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: {words}" or str(e.value).startswith(f"{path}: {words}")


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: cannot read the config file: No such file or directory"


def test_validation_error_names_the_file(tmp_path):
    path = write(tmp_path, GOOD_YAML.replace("batches: 10", "steps: 10"))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (
        f"{path}: searcher.max_length: expected {{batches|records|epochs: positive int}}, got {{'steps': 10}}"
    )


def test_overrides_apply_before_validation(tmp_path):
    path = write(tmp_path, GOOD_YAML)
    config = load_config(
        path,
        [
            "searcher.name=random",
            "searcher.max_trials=4",
            "hyperparameters.lr={type: log, minval: -5, maxval: -2}",
            "hyperparameters.global_batch_size=32",
            "resources.slots_per_trial=2",
            "data.url=http://example.com/a=b",
            "name=",
        ],
    )
    conf = config.to_dict()
    assert conf["searcher"]["name"] == "random" and conf["searcher"]["max_trials"] == 4
    assert conf["hyperparameters"]["lr"] == {
        "type": "log",
        "minval": -5.0,
        "maxval": -2.0,
        "base": 10.0,
        "count": None,
    }
    assert conf["hyperparameters"]["global_batch_size"] == {"type": "const", "val": 32}
    assert conf["resources"]["slots_per_trial"] == 2
    assert conf["data"] == {"url": "http://example.com/a=b"}
    assert conf["name"] is None


def test_override_that_breaks_the_config_is_reported_like_the_file(tmp_path):
    path = write(tmp_path, GOOD_YAML)
    with pytest.raises(ConfigError) as e:
        load_config(path, ["searcher.name=random"])
    assert e.value.path == "searcher.max_trials" and e.value.source == path


@pytest.mark.parametrize(
    "override, path, words",
    [
        ("searcher", "", "expected KEY=VALUE with a dotted KEY"),
        ("=3", "", "expected KEY=VALUE"),
        ("a..b=1", "", "expected KEY=VALUE"),
        ("searcher.metric.x=1", "searcher.metric.x", "searcher.metric is 'val_loss', not a mapping"),
        ("name=[1", "name", "invalid YAML value '[1'"),
    ],
)
def test_bad_override(tmp_path, override, path, words):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, GOOD_YAML), [override])
    assert e.value.source == "--config" and e.value.path == path
    assert words in e.value.message


def test_config_model_type():
    assert isinstance(validate_config(MINIMAL), ExperimentConfig)


def test_import_does_not_load_torch():
    code = "import sys, determined_lite.config; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
