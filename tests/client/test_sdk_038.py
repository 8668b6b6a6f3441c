"""Determined 0.38's SDK methods beyond the tutorials', called as Determined's docs write them
(``from determined.experimental import client``), over records written straight into the store:
names, descriptions and labels, delete, download_code, get_trials, await_first_trial,
top_n_checkpoints, the deprecated Trial and client metric streams (with Determined's
FutureWarnings), Checkpoint/ModelVersion.get_metrics, and Determined's error types."""

from __future__ import annotations

import os
import tarfile

import pytest
from determined.common.api import errors
from determined.experimental import client

from determined_lite.store import Store, StoreError, context_snapshot_dir
from tests.client.test_sdk_store import make_experiment


def _with_training_metrics(made: dict) -> None:
    store = Store()
    for request, trial_id in made["trials"].items():
        for batches in (4, 8):
            store.metrics.add_training(trial_id, batches, {"loss": request + batches / 100})
            store.metrics.add_validation(trial_id, batches, {"val_loss": request * 10 + batches})


def test_name_description_and_labels_are_stored(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    exp.set_name("renamed")
    exp.set_description("a better description")
    exp.add_label("baseline")
    exp.add_label("cpu")
    exp.add_label("cpu")
    exp.remove_label("baseline")
    assert (exp.name, exp.description, exp.labels) == ("renamed", "a better description", {"cpu"})
    fresh = client.get_experiment(made["id"])
    assert (fresh.name, fresh.description, fresh.labels) == ("renamed", "a better description", {"cpu"})
    assert fresh.config["name"] == "renamed" and fresh.config["description"] == "a better description"
    fresh.set_labels({"x", "y"})
    assert client.get_experiment(made["id"]).labels == {"x", "y"}
    with pytest.raises(errors.APIException) as refused:
        fresh.set_name("  ")
    assert refused.value.status_code == 400
    assert str(refused.value) == "`name` must not be an empty or whitespace string"
    assert client.get_experiment(made["id"]).name == "renamed"


def test_get_trials_warns_and_await_first_trial(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    with pytest.warns(FutureWarning, match=r"Experiment.get_trials\(\) has been deprecated"):
        trials = exp.get_trials()
    assert [t.id for t in trials] == [made["trials"][1], made["trials"][2]]
    assert exp.await_first_trial().id == made["trials"][1]

    empty = Store().experiments.create({"name": "none", "searcher": {"metric": "x"}}, None, None)
    Store().experiments.set_state(empty, "CANCELED")
    with pytest.raises(RuntimeError, match="terminated before a trial was started"):
        client.get_experiment(empty).await_first_trial(interval=0.01)


def test_top_n_checkpoints_takes_the_best_of_distinct_trials(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    uuids = made["uuids"]
    with pytest.warns(FutureWarning, match=r"top_n_checkpoints\(\) has been deprecated"):
        # val_loss ascending: t1@8 (1.0), t2@4 (2.0), t1@4 (3.0): one per trial.
        assert [c.uuid for c in exp.top_n_checkpoints(5)] == [uuids[(1, 8)], uuids[(2, 4)]]
        assert [c.uuid for c in exp.top_n_checkpoints(1)] == [uuids[(1, 8)]]
        # A metric by name sorts descending unless smaller_is_better.
        assert [c.uuid for c in exp.top_n_checkpoints(2, "acc")] == [uuids[(2, 4)], uuids[(1, 8)]]
        assert [c.uuid for c in exp.top_n_checkpoints(2, "acc", True)] == [uuids[(1, 4)], uuids[(2, 4)]]


def test_delete_removes_records_and_files_and_refuses_a_running_one(tmp_path):
    made = make_experiment(tmp_path)
    path = client.get_checkpoint(made["uuids"][(1, 8)]).path
    assert os.path.isdir(path)
    client.get_experiment(made["id"]).delete()
    assert not os.path.exists(path)
    with pytest.raises(errors.NotFoundException) as gone:
        client.get_experiment(made["id"])
    assert gone.value.status_code == 404

    active = Store().experiments.create({"name": "running", "searcher": {"metric": "x"}}, None, None)
    with pytest.raises(errors.APIException) as refused:
        client.get_experiment(active).delete()
    assert refused.value.status_code == 400
    assert str(refused.value) == f"experiment {active} is ACTIVE; kill or pause it before deleting it"
    assert client.get_experiment(active).name == "running"


def test_download_code_writes_the_context_snapshot_as_a_tarball(tmp_path, monkeypatch):
    made = make_experiment(tmp_path)
    snapshot = context_snapshot_dir(made["id"])
    os.makedirs(os.path.join(snapshot, "pkg"))
    with open(os.path.join(snapshot, "model_def.py"), "w") as f:
        f.write("X = 1\n")
    with open(os.path.join(snapshot, "pkg", "util.py"), "w") as f:
        f.write("Y = 2\n")
    exp = client.get_experiment(made["id"])
    path = exp.download_code(str(tmp_path / "out" / "code"))
    assert path == str(tmp_path / "out" / "code" / f"exp-{made['id']}_model_def.tar.gz")
    with tarfile.open(path) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    assert files == {"model_def.py": b"X = 1\n", "pkg/util.py": b"Y = 2\n"}
    monkeypatch.chdir(tmp_path)
    assert exp.download_code() == f"exp-{made['id']}_model_def.tar.gz"
    assert os.path.isfile(tmp_path / f"exp-{made['id']}_model_def.tar.gz")


def test_deprecated_trial_methods_warn_as_determined_and_return_its_types(tmp_path):
    made = make_experiment(tmp_path)
    _with_training_metrics(made)
    t1 = made["trials"][1]
    trial = client.get_trial(t1)
    with pytest.warns(FutureWarning, match=r"stream_metrics\(\) has been deprecated"):
        reports = list(trial.stream_metrics("training"))
    assert [(m.steps_completed, m.metrics) for m in reports] == [(4, {"loss": 1.04}), (8, {"loss": 1.08})]
    with pytest.warns(FutureWarning, match="Trial.stream_training_metrics is deprecated"):
        training = list(trial.stream_training_metrics())
    assert all(type(m) is client.TrainingMetrics and m.group == "training" for m in training)
    assert [(m.trial_id, m.total_batches, m.metrics) for m in training] == [
        (t1, 4, {"loss": 1.04}),
        (t1, 8, {"loss": 1.08}),
    ]
    with pytest.warns(FutureWarning, match="Trial.stream_validation_metrics is deprecated"):
        validation = list(trial.stream_validation_metrics())
    assert [(type(m), m.group, m.metrics) for m in validation] == [
        (client.ValidationMetrics, "validation", {"val_loss": 14}),
        (client.ValidationMetrics, "validation", {"val_loss": 18}),
    ]
    uuids = made["uuids"]
    with pytest.warns(FutureWarning, match=r"Trial.select_checkpoint\(\) has been deprecated"):
        assert trial.select_checkpoint(latest=True).uuid == uuids[(1, 8)]
        assert trial.select_checkpoint(best=True).uuid == uuids[(1, 8)]  # val_loss 1.0 < 3.0
        assert trial.select_checkpoint(best=True, sort_by="acc", smaller_is_better=True).uuid == uuids[(1, 4)]
        assert trial.select_checkpoint(uuid=uuids[(2, 4)]).uuid == uuids[(2, 4)]
        with pytest.raises(AssertionError, match="Exactly one of latest, best, or uuid must be set"):
            trial.select_checkpoint(latest=True, best=True)
    with pytest.warns(FutureWarning, match=r"Trial.get_checkpoints\(\) has been deprecated"):
        assert [c.uuid for c in trial.get_checkpoints()] == [uuids[(1, 8)], uuids[(1, 4)]]
    with pytest.warns(FutureWarning, match=r"Trial.logs\(\) has been deprecated"):
        assert list(trial.logs()) == []


def test_client_streams_of_several_trials(tmp_path):
    made = make_experiment(tmp_path)
    _with_training_metrics(made)
    t1, t2 = made["trials"][1], made["trials"][2]
    with pytest.warns(FutureWarning, match="stream_trials_training_metrics is deprecated"):
        training = list(client.stream_trials_training_metrics([t1, t2]))
    assert [(type(m).__name__, m.trial_id, m.steps_completed, m.metrics["loss"]) for m in training] == [
        ("TrainingMetrics", t1, 4, 1.04),
        ("TrainingMetrics", t1, 8, 1.08),
        ("TrainingMetrics", t2, 4, 2.04),
        ("TrainingMetrics", t2, 8, 2.08),
    ]
    with pytest.warns(FutureWarning, match="stream_trials_validation_metrics is deprecated"):
        validation = list(client.stream_trials_validation_metrics([t2]))
    assert [(m.steps_completed, m.metrics) for m in validation] == [
        (4, {"val_loss": 24}),
        (8, {"val_loss": 28}),
    ]
    with pytest.warns(FutureWarning, match="client.stream_trials_metrics is deprecated"):
        assert len(list(client.stream_trials_metrics([t1], "validation"))) == 2


def test_checkpoint_and_model_version_metrics_and_a_duplicate_model(tmp_path):
    made = make_experiment(tmp_path)
    ckpt = client.get_checkpoint(made["uuids"][(1, 8)])
    assert list(ckpt.get_metrics()) == [] and list(ckpt.get_metrics("inference")) == []
    model = client.create_model("mnist", description="digits")
    version = model.register_version(ckpt.uuid)
    with pytest.warns(FutureWarning, match=r"Model.get_metrics\(\) has been deprecated"):
        assert list(version.get_metrics()) == []
    with pytest.raises(errors.APIException) as taken:
        client.create_model("mnist")
    assert taken.value.status_code == 409
    assert str(taken.value) == "avoid names equal to other models (case-sensitive)"
    assert not isinstance(taken.value, StoreError)
    assert [m.name for m in client.list_models()] == ["mnist"]
