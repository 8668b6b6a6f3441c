"""Warm start from ``searcher.source_checkpoint_uuid`` / ``source_trial_id`` (issue 12, item 13).

Determined starts every new trial of such an experiment from the source checkpoint, loaded as
the trial's latest one with its own progress at batch 0 (master: a trial without checkpoints
gets the warm-start checkpoint as its latest; harness: a checkpoint of another trial resets
the trial state). det-lite accepted both fields and ignored them: trials started from scratch.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.fixtures.determined_ckpts import sgd_state, write_current
from tests.fixtures.experiments.linear.model_def import closed_form

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
pytestmark = pytest.mark.timeout(300)


def write_config(tmp_path, name: str, **changes) -> str:
    changes.setdefault("searcher.max_length", {"batches": 4})
    changes.setdefault("checkpoint_storage", {"type": "shared_fs", "host_path": str(tmp_path / "ckpts")})
    return _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, name, **changes)


def create(path: str) -> dict:
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp_id = int(proc.stdout.split("Created experiment ")[1].split()[0])
    (trial,) = describe(exp_id)["trials"]
    return trial


def validated_weight(trial: dict) -> float:
    (v,) = trial["validation_metrics"]
    return v["metrics"]["weight"]


def test_warm_start_from_a_det_lite_checkpoint_and_trial(tmp_path) -> None:
    source = create(write_config(tmp_path, "a.yaml"))
    w4 = closed_form(0.01, 4, 2, 8)[3]
    assert validated_weight(source) == pytest.approx(w4, rel=1e-12)
    (ckpt,) = source["checkpoints"]
    expected = closed_form(0.01, 4, 2, 8, w0=w4)[3]  # 4 more batches from w4, from batch 0
    by_uuid = create(write_config(tmp_path, "b.yaml", **{"searcher.source_checkpoint_uuid": ckpt["uuid"]}))
    assert by_uuid["total_batches"] == 4
    assert validated_weight(by_uuid) == pytest.approx(expected, rel=1e-12)
    by_trial = create(write_config(tmp_path, "c.yaml", **{"searcher.source_trial_id": source["id"]}))
    assert validated_weight(by_trial) == pytest.approx(expected, rel=1e-12)


def test_warm_start_from_a_determined_checkpoint_in_checkpoint_storage(tmp_path) -> None:
    # Determined's shared_fs storage keeps checkpoint <uuid> in host_path/<uuid>: one copied
    # there is found by its uuid. Its optimizer state (lr 0.001) is restored, as Determined does.
    uuid = "0b5e8cd3-5a11-4c5f-9d3c-determined01"
    write_current(
        str(tmp_path / "ckpts" / uuid),
        weights=[{"weight": torch.tensor([[1.5]], dtype=torch.float64)}],
        optimizers=[sgd_state(0.001)],
        trial_cls_spec="model_def:LinearTrial",
        hparams={"lr": 0.01},
        batches_trained=100,
    )
    trial = create(write_config(tmp_path, "d.yaml", **{"searcher.source_checkpoint_uuid": uuid}))
    assert trial["total_batches"] == 4
    assert validated_weight(trial) == pytest.approx(closed_form(0.001, 4, 2, 8, w0=1.5)[3], rel=1e-12)


def test_a_missing_warm_start_checkpoint_is_one_line_and_exit_2(tmp_path) -> None:
    path = write_config(tmp_path, "e.yaml", **{"searcher.source_checkpoint_uuid": "no-such-uuid"})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"det-lite: error: {path}: searcher.source_checkpoint_uuid: no checkpoint 'no-such-uuid' in "
        f"det-lite's store, nor a checkpoint directory {tmp_path / 'ckpts' / 'no-such-uuid'} (a Determined "
        "checkpoint goes there, with its state_dict.pth)"
    ]
    path = write_config(tmp_path, "f.yaml", **{"searcher.source_trial_id": 99})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2 and "searcher.source_trial_id: no trial 99" in proc.stderr


def test_source_checkpoint_uuid_names_a_checkpoint_in_the_storage_never_a_path(tmp_path) -> None:
    # Issue 28, item 1: an absolute path, `..` or a link planted in the root named any
    # directory holding a state_dict.pth (here: the home, or a directory outside).
    from determined_lite.experiment._warm_start import WarmStartError, warm_start_checkpoint
    from determined_lite.store import Store

    root = tmp_path / "home" / "ckpts"
    outside = tmp_path / "outside"
    for directory in (root, outside, tmp_path / "home"):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "state_dict.pth").write_bytes(b"")
    link = "5d1c7e2a-8f4b-4c3d-9e6f-1a2b3c4d5e6f"
    os.symlink(outside, root / link)
    store = Store(str(tmp_path / "det-lite.db"))
    for uuid in ["..", ".", "", str(outside), "../..", "x/../..", link]:
        config = {
            "searcher": {"source_checkpoint_uuid": uuid},
            "checkpoint_storage": {"host_path": str(root)},
        }
        with pytest.raises(WarmStartError) as refused:
            warm_start_checkpoint(config, store)
        (line,) = str(refused.value).splitlines()
        assert line.startswith("searcher.source_checkpoint_uuid: "), line
        if uuid == link:
            assert line.endswith(f"{root / link} is a symbolic link, not a checkpoint directory of {root}")
        else:
            assert f"{uuid!r} is not a checkpoint's storage id" in line, line
