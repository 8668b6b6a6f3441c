"""The worker spec carries the experiment's TrainingSettings through spec.json."""

from __future__ import annotations

import json

from determined_lite.config import Batch, CheckpointPolicy
from determined_lite.launch import WorkerSpec
from determined_lite.searcher import validate_config

CONFIG = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    "min_validation_period": {"batches": 10},
    "checkpoint_policy": "none",
    "scheduling_unit": 5,
}


def test_spec_round_trip_carries_settings(tmp_path):
    config = validate_config(CONFIG)
    settings = config.training_settings()
    spec = WorkerSpec(
        entrypoint=config.entrypoint,
        context_dir=str(tmp_path),
        exp_conf=config.to_dict(),
        hparams={"global_batch_size": 32},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 20},
        trial_seed=1,
        settings=settings.to_json(),
    )
    path = spec.save(str(tmp_path / "spec.json"))
    with open(path) as f:
        assert json.load(f)["settings"] == settings.to_json()
    loaded = WorkerSpec.load(path)
    assert loaded == spec
    assert loaded.training_settings() == settings
    assert loaded.training_settings().validation_period == Batch(10)
    assert loaded.training_settings().reporting_period == Batch(5)
    assert loaded.training_settings().checkpoint_policy is CheckpointPolicy.NONE
