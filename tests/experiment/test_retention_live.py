"""``checkpoint_storage`` retention applies as checkpoints are registered, not only at the end.

A trial checkpointing every 2 batches with ``save_trial_latest: 1, save_trial_best: 0`` holds
one registered checkpoint (and on disk at most that one plus the one being written) while it
runs, exactly one when paused, and resumes from it exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Set

import pytest

from determined_lite.reporting._retention import RetentionPolicy, register_checkpoint
from determined_lite.store import Store
from tests.cli_helpers import REPO, cli, describe, write_config
from tests.experiment.test_experiment_e2e import assert_closed_form_validations
from tests.timing import budget

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = pytest.mark.timeout(240)


def _checkpoint(store: Store, tmp_path, trial_id: int, uuid: str, batches: int, loss: float) -> dict:
    path = tmp_path / "ckpts" / uuid
    path.mkdir(parents=True)
    return {
        "trial_id": trial_id,
        "uuid": uuid,
        "path": str(path),
        "total_batches": batches,
        "metrics": {"loss": loss},
    }


def test_registering_a_checkpoint_drops_what_the_policy_no_longer_keeps(tmp_path):
    store = Store()
    exp = store.experiments.create({"name": "x"}, None, None)
    t1, t2 = store.trials.create(exp, 1, {}, 1), store.trials.create(exp, 2, {}, 2)
    other = _checkpoint(store, tmp_path, t2, "t2-a", 2, 0.1)
    store.checkpoints.add(t2, other["uuid"], other["path"], 2, other["metrics"])
    policy = RetentionPolicy(metric="loss", smaller_is_better=True, save_trial_best=1, save_trial_latest=1)
    dropped = []
    for i, loss in enumerate([0.5, 0.2, 0.4, 0.3], start=1):
        c = _checkpoint(store, tmp_path, t1, f"t1-{i}", 2 * i, loss)
        dropped += [d["uuid"] for d in register_checkpoint(store, exp, policy, c)]
    # Kept: the latest (t1-4) and the best (t1-2, loss 0.2); another trial's are not this chief's.
    assert [c["uuid"] for c in store.checkpoints.list(trial_id=t1)] == ["t1-2", "t1-4"]
    assert dropped == ["t1-1", "t1-3"]
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["t1-2", "t1-4", "t2-a"]
    assert store.trials.get(t1)["latest_checkpoint"] == "t1-4"
    # save_trial_latest 0 and no best: a running trial still keeps the one it resumes from.
    policy = RetentionPolicy(metric="loss", smaller_is_better=True, save_trial_best=0, save_trial_latest=0)
    register_checkpoint(store, exp, policy, _checkpoint(store, tmp_path, t1, "t1-5", 10, 0.9))
    assert [c["uuid"] for c in store.checkpoints.list(trial_id=t1)] == ["t1-5"]
    assert [c["uuid"] for c in store.checkpoints.list(trial_id=t2)] == ["t2-a"]


def _on_disk(root: str) -> Set[str]:
    """Checkpoint directories under their final name (not ``.tmp-*`` ones being assembled)."""
    try:
        return {n for n in os.listdir(root) if not n.startswith(".")}
    except FileNotFoundError:
        return set()


def test_a_running_then_paused_trial_holds_only_what_retention_allows(tmp_path, _det_lite_home):
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{
            "hyperparameters.sleep_s": 0.1,
            "searcher.max_length": {"batches": 24},
            "min_checkpoint_period": {"batches": 2},
            "checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0, "save_experiment_best": 0},
        },
    )
    root = os.path.join(str(_det_lite_home), "checkpoints")
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    store = None
    written: Set[str] = set()
    most_registered = most_on_disk = 0
    deadline = time.monotonic() + budget(120)
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            if store is None and os.path.exists(os.path.join(str(_det_lite_home), "det-lite.db")):
                store = Store()
            trials = store.trials.list(1) if store is not None else []
            if trials:
                registered = store.checkpoints.list(trial_id=trials[0]["id"])
                on_disk = _on_disk(root)
                written |= on_disk
                most_registered = max(most_registered, len(registered))
                most_on_disk = max(most_on_disk, len(on_disk))
                if trials[0]["total_batches"] >= 14:
                    break
            time.sleep(0.05)
        cli("experiment", "pause", "1", check=True)
        out, _ = proc.communicate(timeout=budget(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out
    # While running: one registered checkpoint, and on disk at most it and the one being written.
    assert len(written) >= 5, written  # many were written (and removed)
    assert (most_registered, most_on_disk <= 2) == (1, True), (most_registered, most_on_disk)
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "PAUSED"
    (kept,) = trial["checkpoints"]
    assert kept["total_batches"] == trial["total_batches"]  # the latest: the trial resumes from it
    assert _on_disk(root) == {kept["uuid"]}
    # ... and it does, exactly.
    activated = cli("experiment", "activate", "1")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24
    assert_closed_form_validations(trial)
    (final,) = trial["checkpoints"]
    assert final["total_batches"] == 24 and _on_disk(root) == {final["uuid"]}
