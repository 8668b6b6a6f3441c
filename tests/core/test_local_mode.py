"""``det.core.init()`` outside det-lite: Determined's local mode (no cluster info)."""

from __future__ import annotations

import json
import os

import pytest

from determined_lite import core
from determined_lite.runtime._cluster import SPEC_ENV, get_cluster_info


def test_local_mode_checkpoints_in_a_directory_and_never_preempts(tmp_path, monkeypatch):
    monkeypatch.delenv(SPEC_ENV, raising=False)
    assert get_cluster_info() is None  # as Determined off-cluster
    with core.init(checkpoint_storage=str(tmp_path / "ckpts")) as ctx:
        assert ctx.info is None and ctx.distributed.get_size() == 1
        (op,) = list(_completing(ctx.searcher.operations()))
        assert op.length == 1  # Determined's dummy searcher: one op of length 1
        ctx.train.report_training_metrics(1, {"loss": 0.5})  # logged only
        with ctx.checkpoint.store_path({"steps_completed": 1, "note": "x"}) as (path, uuid):
            (path / "w.txt").write_text("3")
        assert os.listdir(tmp_path / "ckpts") == [uuid]
        with ctx.checkpoint.restore_path(uuid) as restored:
            assert (restored / "w.txt").read_text() == "3"
        meta = ctx.checkpoint.get_metadata(uuid)
        assert (meta["steps_completed"], meta["note"], meta["uuid"]) == (1, "x", uuid)
        ctx.checkpoint.download(uuid, str(tmp_path / "copy"))
        assert (tmp_path / "copy" / "w.txt").read_text() == "3"
        assert not ctx.preempt.should_preempt()
        with pytest.raises(ValueError, match="steps_completed"):
            with ctx.checkpoint.store_path({}):
                pass
        with pytest.raises(FileNotFoundError):
            ctx.checkpoint.get_metadata("no-such-uuid")
    with open(tmp_path / "ckpts" / uuid / "metadata.json") as f:
        assert json.load(f)["total_batches"] == 1


def _completing(ops):
    for op in ops:
        yield op
        op.report_completed(0.0)
