"""Typed settings built once from the validated config: TrainingSettings, SearcherSettings,
the searcher section and DDP options checked by the schema alone."""

from __future__ import annotations

import pytest

from determined_lite.config import (
    DEFAULT_REPORTING_PERIOD,
    DEFAULT_SCHEDULING_UNIT,
    DEFAULT_SMALLER_IS_BETTER,
    Batch,
    CheckpointPolicy,
    ConfigError,
    Epoch,
    Record,
    SearcherSettings,
    TrainingSettings,
    check_ddp_options,
)
from determined_lite.searcher import load_config, validate_config, validate_searcher

YAML = """
entrypoint: model_def:MyTrial
hyperparameters:
  global_batch_size: 32
searcher:
  name: adaptive_asha
  metric: accuracy
  smaller_is_better: false
  max_length: {epochs: 4}
  max_trials: 8
min_validation_period: {records: 640}
min_checkpoint_period: {batches: 0}
scheduling_unit: 25
checkpoint_policy: all
perform_initial_validation: true
optimizations:
  aggregation_frequency: 2
reproducibility:
  experiment_seed: 7
profiling:
  enabled: true
  begin_on_batch: 3
  end_after_batch: 4
det_lite:
  callback_modules: [my_callbacks, pkg.more]
"""

MINIMAL = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
}


def test_training_settings_from_a_yaml(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text(YAML)
    settings = load_config(str(path)).training_settings()
    assert settings == TrainingSettings(
        searcher_metric="accuracy",
        smaller_is_better=False,
        max_length=Epoch(4),
        validation_period=Record(640),
        checkpoint_period=None,
        reporting_period=Batch(25),
        checkpoint_policy=CheckpointPolicy.ALL,
        step_zero_validation=True,
        aggregation_frequency=2,
        average_aggregated_gradients=True,
        experiment_seed=7,
        profiling_enabled=True,
        profiling_begin_on_batch=3,
        profiling_end_after_batch=4,
        callback_modules=("my_callbacks", "pkg.more"),
    )
    assert TrainingSettings.from_json(settings.to_json()) == settings


def test_defaults_come_from_settings():
    config = validate_config(MINIMAL)
    assert config.scheduling_unit == DEFAULT_SCHEDULING_UNIT
    assert config.checkpoint_policy == CheckpointPolicy.BEST.value
    assert config.searcher.smaller_is_better is DEFAULT_SMALLER_IS_BETTER
    settings = config.training_settings()
    assert settings.reporting_period == DEFAULT_REPORTING_PERIOD
    assert settings.checkpoint_policy is CheckpointPolicy.BEST
    assert settings.smaller_is_better is DEFAULT_SMALLER_IS_BETTER
    with pytest.raises(ConfigError, match=r"checkpoint_policy: expected 'best', 'all' or 'none', got 'some'"):
        validate_config(dict(MINIMAL, checkpoint_policy="some"))


def test_searcher_settings_from_the_validated_config(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text(YAML)
    assert load_config(str(path)).searcher_settings() == SearcherSettings(
        name="adaptive_asha",
        metric="accuracy",
        smaller_is_better=False,
        unit="epochs",
        max_length=4,
        max_trials=8,
        max_concurrent_trials=0,
    )
    single = validate_config(MINIMAL).searcher_settings()
    assert (single.unit, single.max_length, single.length) == ("batches", 100, Batch(100))
    assert (single.max_trials, single.max_concurrent_trials) == (None, None)
    # A bare number of batches (older Determined) is read by the schema.
    assert validate_searcher(dict(MINIMAL["searcher"], max_length=30)).length == Batch(30)


def test_validate_searcher_errors_read_as_in_a_whole_config():
    for raw in ({"name": "single", "max_length": {"batches": 1}}, {"name": "random", "metric": "m"}):
        with pytest.raises(ConfigError) as alone:
            validate_searcher(raw, source="s.yaml")
        with pytest.raises(ConfigError) as whole:
            validate_config(dict(MINIMAL, searcher=raw), source="s.yaml")
        assert str(alone.value) == str(whole.value)
    with pytest.raises(ConfigError, match=r"^<config>: searcher: expected a mapping, got 3$"):
        validate_searcher(3)


def test_check_ddp_options_follows_the_schema():
    options = {"bucket_cap_mb": 4, "static_graph": True}
    assert check_ddp_options(options) == options
    with pytest.raises(ValueError, match=r"^x.static_graph must be true or false, got None$"):
        check_ddp_options({"static_graph": None}, where="x")
    with pytest.raises(ValueError, match=r"bucket_cap_mb must be a positive number, got -1"):
        check_ddp_options({"bucket_cap_mb": -1})
    # The same options inside a config: the schema fills in DDPOptions' defaults.
    conf = validate_config(dict(MINIMAL, resources={"ddp_options": {"bucket_cap_mb": 4}})).to_dict()
    assert check_ddp_options(conf["resources"]["ddp_options"]) == conf["resources"]["ddp_options"]
