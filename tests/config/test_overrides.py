"""``--config`` overrides in the forms Determined users type (issue 29 item 12)."""

from __future__ import annotations

import pytest

from determined_lite.config import ConfigError
from determined_lite.searcher import load_config

EPOCHS_YAML = """\
entrypoint: model_def:MyTrial
hyperparameters:
  global_batch_size: 32
records_per_epoch: 640
searcher:
  name: single
  metric: val_loss
  max_length:
    epochs: 3
"""


def _load(tmp_path, overrides):
    path = tmp_path / "experiment.yaml"
    path.write_text(EPOCHS_YAML)
    return load_config(str(path), overrides).to_dict()


def test_setting_another_unit_replaces_the_length(tmp_path):
    conf = _load(tmp_path, ["searcher.max_length.batches=1"])
    assert conf["searcher"]["max_length"] == {"batches": 1}


def test_setting_the_same_unit_keeps_the_unit(tmp_path):
    conf = _load(tmp_path, ["searcher.max_length.epochs=5"])
    assert conf["searcher"]["max_length"] == {"epochs": 5}


def test_a_new_length_mapping_is_made_from_its_unit(tmp_path):
    conf = _load(tmp_path, ["min_validation_period.batches=7"])
    assert conf["min_validation_period"] == {"batches": 7}


def test_a_non_unit_key_in_a_length_is_still_an_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, ["searcher.max_length.steps=2"])
    assert e.value.path.startswith("searcher.max_length")
