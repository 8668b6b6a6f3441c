"""storage/_backend.py on fsspec's in-memory filesystem standing in for a cloud's (s3, gcs and
azure differ only in the filesystem fsspec builds): upload, download, delete, listing, probe,
retries, permanent errors, secrets."""

from __future__ import annotations

import json
import os
import stat

import fsspec
import pytest

from determined_lite._errors import ActionRequired
from determined_lite.storage import REDACTED, StorageError, checkpoint_storage, redact, save_secrets
from determined_lite.storage._backend import _filesystem_options, _remote_root

UUID = "0b5e1c9e-5d4c-4e0e-8a4e-3f1f3d6c2a10"


def memory_fs():
    fs = fsspec.filesystem("memory", skip_instance_cache=True)
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    return fs


@pytest.fixture(params=["s3", "gcs", "azure"])
def cloud(request):
    fields = {
        "s3": {"bucket": "bkt", "prefix": "runs/a"},
        "gcs": {"bucket": "bkt", "prefix": "runs/a"},
        "azure": {"container": "bkt", "connection_string": "AccountName=x;AccountKey=s3cr3t"},
    }[request.param]
    config = {"checkpoint_storage": {"type": request.param, **fields}}
    fs = memory_fs()
    storage = checkpoint_storage(config, fs=fs)
    storage.sleep = lambda s: None
    return storage


def write_checkpoint(path: str) -> None:
    os.makedirs(os.path.join(path, "code"))
    with open(os.path.join(path, "state_dict.pth"), "wb") as f:
        f.write(b"\x00\x01weights")
    with open(os.path.join(path, "code", "model_def.py"), "w") as f:
        f.write("X = 1\n")
    with open(os.path.join(path, "metadata.json"), "w") as f:
        json.dump({"experiment_id": 1, "total_batches": 4}, f)


def test_remote_root_is_bucket_and_prefix():
    assert _remote_root({"type": "s3", "bucket": "b", "prefix": "/p/q/"}) == "b/p/q"
    assert _remote_root({"type": "gcs", "bucket": "b"}) == "b"
    assert _remote_root({"type": "azure", "container": "c"}) == "c"


def test_filesystem_options_are_only_what_the_config_gives(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert _filesystem_options({"type": "gcs", "bucket": "b"}) == {}
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9023")  # as Google's SDK reads it
    assert _filesystem_options({"type": "gcs", "bucket": "b"}) == {
        "endpoint_url": "http://127.0.0.1:9023",
        "token": "anon",
    }
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    s3 = _filesystem_options(
        {"type": "s3", "bucket": "b", "access_key": "A", "secret_key": "S", "endpoint_url": "http://h"}
    )
    assert (s3["key"], s3["secret"], s3["endpoint_url"]) == ("A", "S", "http://h")
    assert "key" not in _filesystem_options({"type": "s3", "bucket": "b"})  # boto's own places then
    azure = _filesystem_options(
        {
            "type": "azure",
            "container": "c",
            "account_url": "https://acct.blob.core.windows.net",
            "credential": "K",
        }
    )
    assert azure == {"account_name": "acct", "account_host": "acct.blob.core.windows.net", "credential": "K"}


def test_upload_download_delete_list_round_trip(cloud, tmp_path):
    local = str(tmp_path / "local" / UUID)
    write_checkpoint(local)
    assert not cloud.exists(UUID)
    cloud.upload(local, UUID)
    assert cloud.exists(UUID)
    assert cloud.list_ids() == [UUID]
    files = sorted(p.lstrip("/")[len(cloud.root) + 1 :] for p in cloud.fs.find(cloud.root))
    assert files == [f"{UUID}/code/model_def.py", f"{UUID}/metadata.json", f"{UUID}/state_dict.pth"]
    assert cloud.read_metadata(UUID) == {"experiment_id": 1, "total_batches": 4}

    dest = str(tmp_path / "copy")
    assert cloud.download(UUID, dest) == dest
    with open(os.path.join(dest, "state_dict.pth"), "rb") as f:
        assert f.read() == b"\x00\x01weights"
    assert sorted(os.listdir(dest)) == ["code", "metadata.json", "state_dict.pth"]
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []
    assert stat.S_IMODE(os.stat(os.path.join(dest, "state_dict.pth")).st_mode) & 0o077 == 0

    cloud.delete(UUID)
    assert not cloud.exists(UUID) and cloud.list_ids() == []
    cloud.delete(UUID)  # gone already: nothing to do


def test_local_copy_downloads_only_when_missing(cloud, tmp_path, monkeypatch):
    monkeypatch.setattr(cloud, "local_root", str(tmp_path / "cache"))
    local = cloud.local_path(UUID)
    write_checkpoint(local)
    cloud.upload(local, UUID)
    calls = []
    real = cloud.download
    monkeypatch.setattr(cloud, "download", lambda u, d: calls.append(u) or real(u, d))
    assert cloud.local_copy(UUID) == local and calls == []
    import shutil

    shutil.rmtree(local)
    assert cloud.local_copy(UUID) == local and calls == [UUID]
    assert os.path.isfile(os.path.join(local, "metadata.json"))


def test_metadata_is_uploaded_first(cloud, tmp_path, monkeypatch):
    local = str(tmp_path / UUID)
    write_checkpoint(local)
    order = []
    put = cloud.fs.put_file
    monkeypatch.setattr(
        cloud.fs, "put_file", lambda s, t, **kw: order.append(t.rsplit("/", 1)[-1]) or put(s, t)
    )
    cloud.upload(local, UUID)
    assert order[0] == "metadata.json" and len(order) == 3


def test_probe_writes_and_deletes(cloud):
    cloud.probe()
    assert cloud.fs.find(cloud.root) == []


def test_transient_errors_are_retried_a_bounded_number_of_times(cloud, monkeypatch):
    waits, attempts = [], []
    real = cloud.fs.pipe_file

    def flaky(*args, **kwargs):
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("connection reset")
        return real(*args, **kwargs)

    cloud.sleep = waits.append
    monkeypatch.setattr(cloud.fs, "pipe_file", flaky)
    cloud.probe()
    assert len(attempts) == 3 and waits == [0.5, 1.0]

    attempts.clear()
    waits.clear()
    monkeypatch.setattr(
        cloud.fs, "pipe_file", lambda *a, **k: (_ for _ in ()).throw(TimeoutError("timed out"))
    )
    with pytest.raises(StorageError) as e:
        cloud.probe()
    assert waits == [0.5, 1.0, 2.0]  # DET_LITE_STORAGE_RETRIES=3 by default
    assert isinstance(e.value, ActionRequired)
    assert (
        str(e.value)
        == f"checkpoint storage {cloud.url}: writing a test object failed after 4 tries: timed out"
    )


@pytest.mark.parametrize(
    "error", [PermissionError("Access Denied"), FileNotFoundError("The specified bucket does not exist")]
)
def test_permanent_errors_are_not_retried(cloud, monkeypatch, error):
    cloud.sleep = lambda s: pytest.fail("a permanent error was retried")

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(cloud.fs, "pipe_file", fail)
    with pytest.raises(StorageError) as e:
        cloud.probe()
    assert str(e.value) == f"checkpoint storage {cloud.url}: writing a test object failed: {error}"


def test_secrets_never_in_messages(monkeypatch):
    config = {
        "checkpoint_storage": {"type": "s3", "bucket": "bkt", "access_key": "AK", "secret_key": "TOPSECRET"}
    }
    storage = checkpoint_storage(config, fs=memory_fs())

    def fail(*args, **kwargs):
        raise PermissionError("signature for TOPSECRET does not match")

    monkeypatch.setattr(storage.fs, "pipe_file", fail)
    with pytest.raises(StorageError) as e:
        storage.probe()
    assert "TOPSECRET" not in str(e.value) and REDACTED in str(e.value)


def test_redacted_secrets_come_back_from_the_private_file(_det_lite_home):
    config = {"checkpoint_storage": {"type": "s3", "bucket": "bkt", "secret_key": "TOPSECRET"}}
    stored, secrets = redact(config)
    assert stored["checkpoint_storage"]["secret_key"] == REDACTED and secrets == {"secret_key": "TOPSECRET"}
    assert config["checkpoint_storage"]["secret_key"] == "TOPSECRET"  # the caller's copy untouched
    with pytest.raises(StorageError, match="checkpoint_storage.secret_key: its value is no longer"):
        checkpoint_storage(stored, experiment_id=3, fs=memory_fs())
    save_secrets(3, secrets)
    path = os.path.join(str(_det_lite_home), "experiments", "3", "storage-secrets.json")
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
    storage = checkpoint_storage(stored, experiment_id=3, fs=memory_fs())
    assert storage._secrets == ("TOPSECRET",)


def test_local_types_are_the_local_disk(tmp_path):
    root = str(tmp_path / "shared")
    shared = checkpoint_storage(
        {"checkpoint_storage": {"type": "shared_fs", "host_path": root, "storage_path": "ck"}}
    )
    assert shared.is_local and shared.local_path(UUID) == os.path.join(root, "ck", UUID)
    directory = checkpoint_storage({"checkpoint_storage": {"type": "directory", "container_path": root}})
    assert directory.local_path(UUID) == os.path.join(root, UUID)
    write_checkpoint(directory.local_path(UUID))
    directory.upload(directory.local_path(UUID), UUID)  # written where it is kept: nothing to do
    assert directory.exists(UUID) and directory.list_ids() == [UUID]
    directory.probe()
    assert sorted(os.listdir(root)) == [UUID]


def test_a_local_root_that_cannot_be_written_names_its_field(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for storage, field in [
        ({"type": "shared_fs", "host_path": str(blocker), "storage_path": "ck"}, "host_path"),
        ({"type": "directory", "container_path": str(blocker / "sub")}, "container_path"),
    ]:
        local = checkpoint_storage({"checkpoint_storage": storage})
        local.sleep = lambda s: pytest.fail("a local error was retried")
        with pytest.raises(StorageError) as e:
            local.probe()
        assert str(e.value).startswith(f"checkpoint_storage.{field}: cannot write checkpoints in {blocker}/")
        assert str(e.value).endswith(": Not a directory"), str(e.value)


def test_a_missing_backend_package_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_gcsfs(name, *args, **kwargs):
        if name == "gcsfs":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gcsfs)
    with pytest.raises(StorageError) as e:
        checkpoint_storage({"checkpoint_storage": {"type": "gcs", "bucket": "b"}})
    assert str(e.value) == "checkpoint_storage.type 'gcs' needs gcsfs: pip install 'determined-lite[gcs]'"


def test_retention_forgets_a_checkpoint_even_when_its_cloud_copy_cannot_be_deleted(cloud, tmp_path, caplog):
    from determined_lite.reporting._retention import remove_checkpoint_dir

    local = str(tmp_path / UUID)
    write_checkpoint(local)

    def fail(*args, **kwargs):
        raise PermissionError("Access Denied")

    cloud.fs.exists = fail
    remove_checkpoint_dir({"uuid": UUID, "path": local}, cloud)
    assert not os.path.exists(local)
    assert "looking up checkpoint" in caplog.text and "checkpoint gc removes it later" in caplog.text
