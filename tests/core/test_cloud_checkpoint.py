"""The Core API's checkpoint calls on a cloud store (fsspec's memory filesystem standing in for
the bucket): a checkpoint whose local copy is gone is downloaded for ``restore_path``,
``download`` and ``get_metadata``; ``delete`` removes the stored copy too."""

from __future__ import annotations

import json
import os

import fsspec

from determined_lite.core._checkpoint import CheckpointContext
from determined_lite.distributed import SingleProcessContext
from determined_lite.storage import checkpoint_storage

UUID = "3c0f6a8e-2b1d-4f5e-9a7c-8d6e5f4a3b21"


def test_reads_fetch_from_the_bucket_and_delete_removes_it(tmp_path, monkeypatch):
    fs = fsspec.filesystem("memory", skip_instance_cache=True)
    fs.store.clear()
    storage = checkpoint_storage(
        {"checkpoint_storage": {"type": "s3", "bucket": "bkt", "prefix": "p"}}, fs=fs
    )
    monkeypatch.setattr(storage, "local_root", str(tmp_path / "cache"))
    source = tmp_path / "written"
    source.mkdir()
    (source / "state.json").write_text(json.dumps({"w": 1.5}))
    (source / "metadata.json").write_text(json.dumps({"steps_completed": 4}))
    storage.upload(str(source), UUID)

    ctx = CheckpointContext(SingleProcessContext(), storage.local_root, storage=storage)
    with ctx.restore_path(UUID) as path:
        assert json.loads((path / "state.json").read_text()) == {"w": 1.5}
        assert str(path) == os.path.join(storage.local_root, UUID)
    assert ctx.get_metadata(UUID) == {"steps_completed": 4}
    dest = tmp_path / "dest"
    ctx.download(UUID, dest)
    assert json.loads((dest / "state.json").read_text()) == {"w": 1.5}

    ctx.delete(UUID)
    assert not storage.exists(UUID) and not os.path.exists(os.path.join(storage.local_root, UUID))
