"""Nothing read from checkpoint storage lands outside its destination (``storage/_confine.py``):
keys planted in moto's S3 server under a checkpoint's prefix, and symbolic links planted in a
shared_fs checkpoint, are refused with one line before anything is written."""

from __future__ import annotations

import os

import pytest

from determined_lite.storage import UnsafeNameError, checkpoint_storage, copy_checkpoint
from determined_lite.storage._confine import name_problem
from tests.cloud_storage import BUCKET, PREFIX, s3_server

UUID = "6a1f2e3d-4c5b-4a69-8e7f-0a1b2c3d4e5f"
URL = f"s3://{BUCKET}/{PREFIX}"


@pytest.fixture
def s3():
    with s3_server() as server:
        yield server


def _tree(top) -> list:
    """Every path under ``top`` (links not followed), relative."""
    out = []
    for parent, dirs, files in os.walk(str(top)):
        out += [os.path.relpath(os.path.join(parent, n), str(top)) for n in dirs + files]
    return sorted(out)


def _s3_storage(s3):
    config = {
        "checkpoint_storage": {"type": "s3", "bucket": BUCKET, "prefix": PREFIX, "endpoint_url": s3.url}
    }
    return checkpoint_storage(config)


@pytest.mark.parametrize(
    "planted, why",
    [
        ("../../evil", "a '..' segment in its name"),
        ("state/../../../../evil", "a '..' segment in its name"),
        ("/evil", "an absolute name"),
        ("./evil", "a '.' segment in its name"),
        ("a//evil", "an empty segment in its name"),
        ("metadata.json/evil", "'metadata.json' is an object, not a folder"),
        ("metadata.json/", "'metadata.json' is an object, not a folder"),
    ],
)
def test_planted_s3_keys_are_refused_before_anything_is_written(s3, tmp_path, monkeypatch, planted, why):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    client = s3.client()
    for name, body in [("metadata.json", b"{}"), ("state_dict.pth", b"w"), (planted, b"evil")]:
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{UUID}/{name}", Body=body)
    storage = _s3_storage(s3)
    work = tmp_path / "work"
    dest = work / "a" / "b" / "dest"
    for read in (lambda: storage.download(UUID, str(dest)), lambda: storage.local_copy(UUID, str(dest))):
        with pytest.raises(UnsafeNameError) as e:
            read()
        assert str(e.value) == (
            f"checkpoint storage {URL}: refused to read '{BUCKET}/{PREFIX}/{UUID}/{planted}' ({why}): "
            "a stored name must stay inside its destination; nothing was written"
        )
    assert _tree(tmp_path) == []  # not the destination, not its parents, no staging, no evil


def test_names_with_dots_that_stay_inside_are_read(s3, tmp_path, monkeypatch):
    """``..x``, ``...`` and folder markers (the checkpoint's own too) are names like any other:
    downloaded where they say."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    client = s3.client()
    for name in ["", "metadata.json", "..x", "a/...", "folder/"]:
        client.put_object(
            Bucket=BUCKET, Key=f"{PREFIX}/{UUID}/{name}", Body=b"" if name.endswith("/") or not name else b"1"
        )
    dest = _s3_storage(s3).download(UUID, str(tmp_path / "dest"))
    assert _tree(dest) == ["..x", "a", "a/...", "folder", "metadata.json"]
    assert _tree(tmp_path) == ["dest"] + [f"dest/{n}" for n in _tree(dest)]


def test_upload_keys_never_leave_the_checkpoint(tmp_path, monkeypatch):
    """A listing that named ``..`` (none a file system gives today) is refused, not uploaded."""
    from determined_lite.storage import StorageError, _backend

    uploaded = []
    storage = _backend.CheckpointStorage("s3", _PutSpy(uploaded), "bucket/p", str(tmp_path))
    monkeypatch.setattr(_backend, "upload_names", lambda local_dir: ["ok", "../../x"])
    with pytest.raises(StorageError) as e:
        storage.upload("/src", UUID)
    assert (
        str(e.value)
        == "checkpoint storage s3://bucket/p: refused to upload '../../x' (a '..' segment in its name)"
    )
    assert uploaded == [("/src/ok", f"bucket/p/{UUID}/ok")]


class _PutSpy:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def put_file(self, source: str, target: str) -> None:
        self.calls.append((source, target))


def test_name_problem_accepts_only_names_inside():
    assert [name_problem(n) for n in ["a", "a/b.c", "..a/...", "a..b"]] == [None] * 4
    assert name_problem("a/../b") == "a '..' segment in its name"
    assert name_problem("a\0b") == "a NUL character in its name"


@pytest.mark.parametrize(
    "link, target, why",
    [
        ("sub/..evil", "../../outside", "to ../../outside, outside the checkpoint"),
        ("sub/..evil", "x/../../../outside", "to x/../../../outside, outside the checkpoint"),
        ("evil", "OUTSIDE", "to the absolute path OUTSIDE"),
        ("evil", f"../{UUID}/metadata.json", f"to ../{UUID}/metadata.json, outside the checkpoint"),
        ("sub/evil", "dot/../../outside", "to dot/../../outside, outside the checkpoint"),  # dot -> .
        ("sub/fine", "../metadata.json", None),  # inside: copied
    ],
)
def test_a_shared_fs_link_out_of_the_checkpoint_is_refused(tmp_path, link, target, why):
    """A link planted in a shared_fs checkpoint that points outside it: a copy (export, the SDK's
    and the Core API's download) and a download to another directory refuse it, with nothing
    written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    ckpt = tmp_path / "root" / UUID
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "metadata.json").write_text("{}")
    os.symlink(target.replace("OUTSIDE", str(outside)), ckpt / link)
    if target.startswith("dot/"):
        os.symlink(".", ckpt / "sub" / "dot")  # inside itself, but ".." from it leaves the checkpoint
    before = _tree(tmp_path)
    storage = checkpoint_storage(
        {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "root")}}
    )
    copies = {
        "copy": lambda dest: copy_checkpoint(str(ckpt), dest),
        "download": lambda dest: storage.download(UUID, dest),
    }
    for name, copy in copies.items():
        if why is None:
            copy(str(tmp_path / name))
            assert (tmp_path / name / link).read_text() == "{}"
            continue
        with pytest.raises(UnsafeNameError) as e:
            copy(str(tmp_path / name))
        why = why.replace("OUTSIDE", str(outside))
        assert str(e.value) == (
            f"checkpoint {ckpt}: refused to copy the symbolic link {link} ({why}): "
            "a copied link must stay inside the checkpoint; nothing was written"
        )
        assert _tree(tmp_path) == before


def test_links_inside_a_checkpoint_are_copied_as_links(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "sub" / "w").write_text("1")
    os.symlink("sub/w", ckpt / "latest")
    os.symlink("../sub", ckpt / "sub" / "self")
    copy_checkpoint(str(ckpt), str(tmp_path / "copy"))
    assert os.readlink(tmp_path / "copy" / "latest") == "sub/w"
    assert (tmp_path / "copy" / "latest").read_text() == "1"
    assert os.readlink(tmp_path / "copy" / "sub" / "self") == "../sub"


def test_export_and_the_sdk_refuse_a_planted_link_with_one_line(tmp_path, _det_lite_home):
    """A registered shared_fs checkpoint with a link planted out of it: `checkpoint export`
    exits 1 with one line and no traceback, the SDK's ``Checkpoint.download()`` raises; neither
    writes anything (the SDK followed the link before: the file it points to was copied in)."""
    from determined_lite import client
    from determined_lite.store import Store
    from tests.cli_helpers import cli

    store = Store()
    experiment = store.experiments.create({"searcher": {"name": "single"}}, "/ctx", None, state="COMPLETED")
    trial = store.trials.create(experiment, 1, {}, 0, state="COMPLETED")
    ckpt = _det_lite_home / "checkpoints" / UUID
    ckpt.mkdir(parents=True)
    (ckpt / "metadata.json").write_text('{"steps_completed": 2}')
    secret = tmp_path / "secret"
    secret.write_text("key")
    os.symlink(str(secret), ckpt / "evil")
    store.checkpoints.add(trial, UUID, str(ckpt), 2)
    why = (
        f"checkpoint {ckpt}: refused to copy the symbolic link evil (to the absolute path {secret}): a "
        "copied link must stay inside the checkpoint; nothing was written"
    )
    dest = tmp_path / "out" / "exported"
    proc = cli("checkpoint", "export", UUID, str(dest))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [f"det-lite: error: could not copy checkpoint {UUID} to {dest}: {why}"]
    with pytest.raises(UnsafeNameError) as e:
        client.get_checkpoint(UUID).download(str(tmp_path / "sdk"))
    assert str(e.value) == why
    assert sorted(os.listdir(tmp_path)) == sorted(["secret", "out", os.path.basename(_det_lite_home)])
    assert os.listdir(tmp_path / "out") == []
