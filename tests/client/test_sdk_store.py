"""The SDK (``determined_lite.client``) over records written straight into the store: Determined's
checkpoint order, ``top_checkpoint`` with ``smaller_is_better``, checkpoint metadata, the model
registry, and pause/kill of an experiment no process runs."""

from __future__ import annotations

import json
import os

import pytest
from determined.common.api.errors import APIException

from determined_lite import client
from determined_lite.client import CheckpointSortBy, ExperimentState, OrderBy
from determined_lite.store import NotFoundError, Store

# (trial request, batches, metrics): val_loss is the searcher metric; t2's batch-8 checkpoint has none.
CHECKPOINTS = [
    (1, 4, {"val_loss": 3.0, "acc": 0.5}),
    (1, 8, {"val_loss": 1.0, "acc": 0.7}),
    (2, 4, {"val_loss": 2.0, "acc": 0.9}),
    (2, 8, None),
]


def make_experiment(tmp_path, smaller_is_better: bool = True) -> dict:
    """An ended experiment of two trials with ``CHECKPOINTS``; returns uuid by (request, batches)."""
    store = Store()
    config = {
        "name": "fake",
        "searcher": {"name": "grid", "metric": "val_loss", "smaller_is_better": smaller_is_better},
    }
    exp_id = store.experiments.create(config, None, None)
    trials = {r: store.trials.create(exp_id, r, {"lr": 0.1 * r}, seed=r) for r in (1, 2)}
    uuids = {}
    for request, batches, metrics in CHECKPOINTS:
        uuid = f"ckpt-{request}-{batches}"
        path = tmp_path / "ckpts" / uuid
        path.mkdir(parents=True)
        (path / "state_dict.pth").write_bytes(b"x" * batches)
        (path / "metadata.json").write_text(json.dumps({"steps_completed": batches}))
        store.checkpoints.add(trials[request], uuid, str(path), batches, metrics)
        uuids[(request, batches)] = uuid
    store.experiments.set_state(exp_id, "COMPLETED")
    return {"id": exp_id, "trials": trials, "uuids": uuids}


def order(checkpoints) -> list:
    return [(c.training.trial_id, c.steps_completed) for c in checkpoints]


def test_default_order_is_the_searcher_metric_in_its_direction_with_missing_last(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    t1, t2 = made["trials"][1], made["trials"][2]
    assert order(exp.list_checkpoints()) == [(t1, 8), (t2, 4), (t1, 4), (t2, 8)]
    assert order(exp.list_checkpoints(max_results=2)) == [(t1, 8), (t2, 4)]
    with pytest.warns(FutureWarning, match="top_checkpoint"):
        assert exp.top_checkpoint().uuid == made["uuids"][(1, 8)]
    # An explicit order on the searcher metric, and a metric by name, missing values last either way.
    assert order(exp.list_checkpoints(CheckpointSortBy.SEARCHER_METRIC, OrderBy.DESC)) == [
        (t1, 4),
        (t2, 4),
        (t1, 8),
        (t2, 8),
    ]
    assert order(exp.list_checkpoints("acc", OrderBy.DESCENDING)) == [(t2, 4), (t1, 8), (t1, 4), (t2, 8)]
    assert order(exp.list_checkpoints(CheckpointSortBy.BATCH_NUMBER, OrderBy.ASC))[:2] == [(t1, 4), (t2, 4)]
    assert order(exp.list_checkpoints(CheckpointSortBy.TRIAL_ID, OrderBy.DESC))[:2] == [(t2, 4), (t2, 8)]
    with pytest.raises(AssertionError, match="both set, or neither"):
        exp.list_checkpoints(sort_by="acc")
    with pytest.raises(AssertionError, match="both set, or neither"):
        exp.list_checkpoints(order_by=OrderBy.ASC)


def test_top_checkpoint_with_sort_by_follows_smaller_is_better_and_defaults_to_larger(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    with pytest.warns(FutureWarning):
        assert exp.top_checkpoint("val_loss", smaller_is_better=True).uuid == made["uuids"][(1, 8)]
        assert exp.top_checkpoint("val_loss", smaller_is_better=False).uuid == made["uuids"][(1, 4)]
        # Determined's code: a sort_by without smaller_is_better sorts descending.
        assert exp.top_checkpoint("val_loss").uuid == made["uuids"][(1, 4)]
        assert exp.top_checkpoint("acc").uuid == made["uuids"][(2, 4)]
        # Per trial, the same rules.
        trial = client.get_trial(made["trials"][1])
        assert trial.top_checkpoint().uuid == made["uuids"][(1, 8)]
        assert trial.top_checkpoint("acc", smaller_is_better=True).uuid == made["uuids"][(1, 4)]
    assert [c.steps_completed for c in trial.list_checkpoints()] == [8, 4]


def test_a_larger_is_better_searcher_sorts_descending(tmp_path):
    made = make_experiment(tmp_path, smaller_is_better=False)
    exp = client.get_experiment(made["id"])
    t1, t2 = made["trials"][1], made["trials"][2]
    assert order(exp.list_checkpoints()) == [(t1, 4), (t2, 4), (t1, 8), (t2, 8)]
    with pytest.warns(FutureWarning):
        assert exp.top_checkpoint().uuid == made["uuids"][(1, 4)]


def test_checkpoint_fields_download_and_metadata_round_trip(tmp_path, monkeypatch):
    made = make_experiment(tmp_path)
    uuid = made["uuids"][(2, 4)]
    ckpt = client.get_checkpoint(uuid)
    assert ckpt.uuid == uuid and ckpt.state == client.CheckpointState.COMPLETED
    assert ckpt.training.experiment_id == made["id"] and ckpt.training.trial_id == made["trials"][2]
    assert ckpt.training.hparams == {"lr": 0.2}
    assert ckpt.training.validation_metrics == {"avgMetrics": {"val_loss": 2.0, "acc": 0.9}}
    assert ckpt.training.experiment_config["searcher"]["metric"] == "val_loss"
    assert ckpt.resources == {"state_dict.pth": 4, "metadata.json": len(json.dumps({"steps_completed": 4}))}
    assert ckpt.metadata == {"steps_completed": 4}  # the checkpoint's metadata.json until changed

    ckpt.add_metadata({"stage": "prod", "owner": {"team": "a"}})
    ckpt.add_metadata({"stage": "canary"})
    again = client.get_checkpoint(uuid)
    assert again.metadata == {"steps_completed": 4, "stage": "canary", "owner": {"team": "a"}}
    again.remove_metadata(["owner", "absent"])
    assert client.get_checkpoint(uuid).metadata == {"steps_completed": 4, "stage": "canary"}

    dest = again.download(str(tmp_path / "dl"))
    assert dest == str(tmp_path / "dl") and os.path.isfile(os.path.join(dest, "state_dict.pth"))
    # Determined: the store's metadata is not written into the checkpoint's own files.
    assert json.loads((tmp_path / "dl" / "metadata.json").read_text()) == {"steps_completed": 4}
    monkeypatch.chdir(tmp_path)
    assert again.download() == os.path.join("checkpoints", uuid)
    assert os.path.isfile(tmp_path / "checkpoints" / uuid / "state_dict.pth")
    with pytest.raises(NotFoundError):
        client.get_checkpoint("no-such-uuid")


def test_model_registry_round_trip(tmp_path):
    made = make_experiment(tmp_path)
    model = client.create_model("mnist", description="digits", metadata={"task": "cls"})
    assert (model.name, model.description, model.metadata) == ("mnist", "digits", {"task": "cls"})
    with pytest.raises(APIException, match="avoid names equal to other models"):
        client.create_model("mnist")
    assert model.get_version() is None
    v1 = model.register_version(made["uuids"][(1, 8)])
    v2 = client.get_model("mnist").register_version(made["uuids"][(2, 4)])
    assert (v1.model_version, v2.model_version) == (1, 2)
    latest = client.get_model("mnist").get_version()
    assert latest.model_version == 2 and latest.checkpoint.uuid == made["uuids"][(2, 4)]
    first = client.get_model(model.model_id).get_version(1)
    assert first.checkpoint.training.validation_metrics["avgMetrics"]["val_loss"] == 1.0
    assert [v.model_version for v in model.list_versions()] == [2, 1]
    assert [v.model_version for v in model.list_versions(OrderBy.ASC)] == [1, 2]
    with pytest.raises(NotFoundError):
        model.get_version(7)
    with pytest.raises(NotFoundError, match="checkpoint"):
        model.register_version("no-such-uuid")

    model.add_metadata({"owner": "me"})
    model.remove_metadata(["task"])
    client.create_model("alpha")
    with pytest.warns(FutureWarning, match=r"get_models\(\) has been deprecated"):
        assert [m.name for m in client.get_models()] == ["alpha", "mnist"]
    assert client.get_model("mnist").metadata == {"owner": "me"}
    first.set_notes("the first")
    assert client.get_model("mnist").get_version(1).notes == "the first"
    with pytest.raises(NotFoundError):
        client.get_model("nope")
    assert len(Store().models.list_versions("mnist")) == 2


def test_pause_and_kill_without_a_running_process_change_the_store(tmp_path):
    store = Store()
    exp_id = store.experiments.create({"searcher": {"metric": "loss"}}, None, None)
    trial_id = store.trials.create(exp_id, 1, {}, seed=1)
    exp = client.get_experiment(exp_id)
    assert exp.state == ExperimentState.ACTIVE
    exp.pause()
    exp.reload()
    assert exp.state == ExperimentState.PAUSED and store.experiments.get(exp_id)["state"] == "PAUSED"
    with pytest.raises(ValueError, match="paused state"):
        exp.wait(interval=0.01)
    exp.kill()
    assert exp.wait(interval=0.01) == ExperimentState.CANCELED
    assert store.trials.get(trial_id)["state"] == "CANCELED"
    assert [e.id for e in client.list_experiments()] == [exp_id]
    assert client.list_experiments(states=[ExperimentState.ACTIVE]) == []


def test_create_experiment_refusals_raise_with_det_lites_message(tmp_path):
    linear = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "experiments", "linear")
    config = {
        "entrypoint": "model_def:NoSuchTrial",
        "hyperparameters": {"global_batch_size": 2, "lr": 0.01},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 2}},
    }
    with pytest.raises(client.ExperimentCreateError, match="defines no 'NoSuchTrial'"):
        client.create_experiment(config, linear)
    with pytest.raises(ValueError, match="model_dir"):
        client.create_experiment(config)
    assert client.list_experiments() == []


def test_experiment_labels_and_notes_round_trip(tmp_path):
    # Determined's Experiment.add_label / remove_label / set_labels / set_notes, kept in the
    # store (schema v7): a new handle reads what another one wrote.
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    assert exp.labels is None and exp.notes == ""
    exp.add_label("baseline")
    exp.add_label("cpu")
    exp.add_label("cpu")  # already there: nothing changes
    exp.remove_label("absent")  # not there: nothing changes
    exp.set_notes("lr 0.1 diverges")
    again = client.get_experiment(made["id"])
    assert (again.labels, again.notes) == ({"baseline", "cpu"}, "lr 0.1 diverges")
    again.remove_label("baseline")
    exp.reload()
    assert exp.labels == {"cpu"}
    exp.set_labels(set())
    assert client.get_experiment(made["id"]).labels is None
    with pytest.raises(NotFoundError):
        client.Experiment(999, exp._session).add_label("x")


def test_checkpoint_delete_forgets_it_and_removes_its_directory(tmp_path):
    made = make_experiment(tmp_path)
    exp = client.get_experiment(made["id"])
    (best, *_) = exp.list_checkpoints(CheckpointSortBy.SEARCHER_METRIC, OrderBy.ASC)
    assert best.uuid == made["uuids"][(1, 8)] and os.path.isdir(best.path)
    best.delete()
    assert best.state == client.CheckpointState.DELETED and not os.path.exists(best.path)
    assert [c.uuid for c in exp.list_checkpoints(CheckpointSortBy.SEARCHER_METRIC, OrderBy.ASC)] == [
        made["uuids"][(2, 4)],
        made["uuids"][(1, 4)],
        made["uuids"][(2, 8)],
    ]
    assert Store().trials.get(made["trials"][1])["latest_checkpoint"] == made["uuids"][(1, 4)]
    with pytest.raises(NotFoundError):
        client.get_checkpoint(best.uuid).delete()


def test_a_model_versions_checkpoint_outlives_retention_and_refuses_deletion(tmp_path):
    """Determined's master keeps model-registry checkpoints out of checkpoint GC and refuses to
    delete them; before, retention removed them (the version then named nothing)."""
    from determined_lite.reporting._retention import RetentionPolicy, apply_retention
    from tests.cli_helpers import cli

    made = make_experiment(tmp_path)
    kept = made["uuids"][(2, 8)]  # no metric: retention's first victim
    client.create_model("digits").register_version(kept)
    store = Store()
    assert store.checkpoints.registered(made["id"]) == {kept: "model 'digits' version 1"}
    policy = RetentionPolicy("val_loss", True, save_trial_best=0, save_trial_latest=0, save_experiment_best=1)
    assert apply_retention(store, made["id"], policy, []) == 2
    left = {c["uuid"] for c in store.checkpoints.list(experiment_id=made["id"])}
    assert left == {made["uuids"][(1, 8)], kept}
    assert (tmp_path / "ckpts" / kept / "state_dict.pth").read_bytes() == b"x" * 8
    registry = rf"checkpoint {kept} is in the model registry \(model 'digits' version 1\)"
    with pytest.raises(ValueError, match=registry):
        client.get_checkpoint(kept).delete()
    assert store.checkpoints.get(kept) is not None
    refused = cli("experiment", "delete", str(made["id"]), "--yes")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        f"experiment {made['id']} has checkpoints in the model registry (checkpoint {kept}: "
        "model 'digits' version 1); delete those model versions first"
    )
    assert store.experiments.get(made["id"])["id"] == made["id"]  # nothing deleted
    client.get_model("digits").get_version(1).delete()
    client.get_checkpoint(kept).delete()
    assert store.checkpoints.get(kept) is None and not (tmp_path / "ckpts" / kept).exists()
