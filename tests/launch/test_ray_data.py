"""The run's data on Ray without a cluster (``launch/_ray_data.py``): the context archive, the
node's spec, and what a slot's files send back to the driver."""

from __future__ import annotations

import os

from determined_lite.launch._ray_data import FileMirror, apply_files, node_spec, pack_context, unpack_context
from tests.experiment.test_s3_storage import SECRET, s3, storage  # noqa: F401


def test_the_context_is_unpacked_once_per_node_and_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("DET_LITE_RAY_CACHE", str(tmp_path / "cache"))
    context = tmp_path / "context"
    (context / "pkg").mkdir(parents=True)
    (context / "model_def.py").write_text("X = 1\n")
    (context / "pkg" / "data.txt").write_text("abc")
    key, data = pack_context(str(context))
    assert pack_context(str(context)) == (key, data)  # the same content, the same key
    where = unpack_context(key, data)
    assert where == str(tmp_path / "cache" / "contexts" / key)
    assert open(os.path.join(where, "model_def.py")).read() == "X = 1\n"
    assert open(os.path.join(where, "pkg", "data.txt")).read() == "abc"
    os.unlink(os.path.join(where, "model_def.py"))
    assert unpack_context(key, data) == where and not os.path.exists(os.path.join(where, "model_def.py"))


def test_the_node_spec_has_only_node_paths(tmp_path):
    fields = {
        "context_dir": "/driver/home/experiments/1/context",
        "result_path": "/driver/home/experiments/1/trial_1/result.json",
        "tensorboard_path": "/driver/home/tensorboard/experiment_1/trial_1",
        "checkpoint_root": "/driver/home/checkpoints",
        "wake_path": "/driver/home/experiments/1/wake",
        "exp_conf": {"checkpoint_storage": {"type": "s3", "bucket": "b"}},
    }
    spec = node_spec(fields, str(tmp_path), "/node/context")
    assert spec["context_dir"] == "/node/context"
    assert spec["result_path"] == str(tmp_path / "run" / "result.json")
    assert spec["tensorboard_path"] == str(tmp_path / "tensorboard")
    assert spec["checkpoint_root"] == str(tmp_path / "home" / "checkpoints")
    assert spec["wake_path"] is None
    shared = dict(fields, exp_conf={"checkpoint_storage": {"type": "shared_fs", "host_path": "/nfs"}})
    assert node_spec(shared, str(tmp_path), "/c")["checkpoint_root"] == "/driver/home/checkpoints"


def test_a_slots_files_reach_the_driver_and_nothing_else(tmp_path):
    node_run, node_tb = tmp_path / "node" / "run", tmp_path / "node" / "tb"
    (node_tb / "sub").mkdir(parents=True)
    node_run.mkdir()
    driver_run, driver_tb = tmp_path / "driver" / "trial_1", tmp_path / "driver" / "tb"
    driver_run.mkdir(parents=True)
    mirror = FileMirror(str(node_run), str(node_tb))
    (node_run / "result.json").write_text('{"status": "completed"}')
    (node_run / "result.json.heartbeat.rank0.json").write_text("{}")  # stays on the node
    (node_run / "result.json.ask.json").write_text("{}")  # asked on the pipe
    (node_tb / "sub" / "events").write_bytes(b"one")
    result = str(driver_run / "result.json")
    apply_files(mirror.changes(), result, str(driver_tb))
    assert sorted(os.listdir(driver_run)) == ["result.json"]
    assert (driver_run / "result.json").read_text() == '{"status": "completed"}'
    with open(node_tb / "sub" / "events", "ab") as f:
        f.write(b" two")
    changes = mirror.changes()
    assert changes["run"] == {}  # unchanged files are not sent again
    apply_files(changes, result, str(driver_tb))
    assert (driver_tb / "sub" / "events").read_bytes() == b"one two"
    evil = {
        "run": {"../escape.json": "x", "result.json/../../x": "y"},
        "tensorboard": [("../../out", 0, "eA=="), ("/abs", 0, "eA==")],
    }
    apply_files(evil, result, str(driver_tb))
    assert sorted(os.listdir(tmp_path / "driver")) == ["tb", "trial_1"] and not (tmp_path / "out").exists()


def test_a_node_restores_from_the_bucket_with_the_secrets_it_was_given(tmp_path, s3):  # noqa: F811
    """The actor's part of a resume with a cloud storage: the storage's secrets are kept where
    the worker's storage reads them (its home), and the checkpoint comes from the bucket onto
    the node, whatever path the driver knew it by."""
    import json
    import uuid as uuid_module

    from determined_lite.launch._ray_data import restore_here
    from determined_lite.storage import checkpoint_storage

    config = {"checkpoint_storage": storage(s3)}
    checkpoint = tmp_path / "written"
    checkpoint.mkdir()
    (checkpoint / "metadata.json").write_text('{"steps_completed": 8}')
    uuid = str(uuid_module.uuid4())
    checkpoint_storage(config).upload(str(checkpoint), uuid)
    redacted = {"checkpoint_storage": dict(storage(s3), secret_key="<redacted>")}
    home = tmp_path / "slot" / "home"
    spec = {
        "exp_conf": redacted,
        "experiment_id": 3,
        "checkpoint_root": str(home / "checkpoints"),
        "latest_checkpoint": f"/driver/home/checkpoints/{uuid}",
    }
    restore_here(spec, {"secret_key": SECRET}, str(home))
    assert spec["latest_checkpoint"] == str(home / "checkpoints" / uuid)
    assert (home / "checkpoints" / uuid / "metadata.json").read_text() == '{"steps_completed": 8}'
    secrets = home / "experiments" / "3" / "storage-secrets.json"
    assert json.loads(secrets.read_text()) == {"secret_key": SECRET}
    assert oct(secrets.stat().st_mode & 0o777) == "0o600"
