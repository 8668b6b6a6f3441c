"""The worker spec carries the experiment's TrainingSettings through spec.json."""

from __future__ import annotations

import json
import os

from determined_lite.config import Batch, CheckpointPolicy
from determined_lite.launch import WorkerResult, WorkerSpec, WorkerStatus
from determined_lite.searcher import validate_config

CONFIG = {
    "entrypoint": "model_def:MyTrial",
    "hyperparameters": {"global_batch_size": 32},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
    "min_validation_period": {"batches": 10},
    "checkpoint_policy": "none",
    "scheduling_unit": 5,
}


def _spec(tmp_path) -> WorkerSpec:
    config = validate_config(CONFIG)
    return WorkerSpec(
        entrypoint=config.entrypoint,
        context_dir=str(tmp_path),
        exp_conf=config.to_dict(),
        hparams={"global_batch_size": 32},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 20},
        trial_seed=1,
        settings=config.training_settings().to_json(),
    )


def test_spec_round_trip_carries_settings(tmp_path):
    spec = _spec(tmp_path)
    settings = spec.training_settings()
    path = spec.save(str(tmp_path / "spec.json"))
    with open(path) as f:
        assert json.load(f)["settings"] == settings.to_json()
    loaded = WorkerSpec.load(path)
    assert loaded == spec
    assert loaded.training_settings() == settings
    assert loaded.training_settings().validation_period == Batch(10)
    assert loaded.training_settings().reporting_period == Batch(5)
    assert loaded.training_settings().checkpoint_policy is CheckpointPolicy.NONE


def test_a_spec_and_a_result_are_written_whole_and_private_without_waiting_on_the_disk(tmp_path, monkeypatch):
    """They are messages between a runner and its live workers: renamed into place, 0600, and
    never fsynced (an fsync per run's start and end only waited on the disk)."""

    def no_fsync(fd: int) -> None:
        raise AssertionError("a run's spec or result was fsynced")

    monkeypatch.setattr(os, "fsync", no_fsync)
    spec = _spec(tmp_path)
    assert WorkerSpec.load(spec.save(str(tmp_path / "spec.json"))) == spec
    result = WorkerResult(WorkerStatus.COMPLETED, total_batches=20)
    assert WorkerResult.load(result.save(spec.result_path)) == result
    for name in ("spec.json", "result.json"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["result.json", "spec.json"]  # no temporary file left
