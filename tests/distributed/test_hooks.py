"""Every hook on 2 workers, both engines: the same hooks in the same order and number on each
rank as in a 1-slot run, chief-only hooks on the chief only, in ``HOOK_TABLE`` order.

The run resumes (from a 1-slot checkpoint at batch 2) so that the checkpoint-reading hooks fire,
and validates, reports and checkpoints every 2 batches up to batch 6 (epochs of 2 batches).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest

from determined_lite import pytorch
from determined_lite.pytorch._hooks import CHIEF_ONLY_HOOKS, HOOKS
from tests.distributed._helpers import BACKENDS, TRIAL_SEED, describe, run
from tests.fixtures.dist_trials import read_records
from tests.fixtures.hook_trials import HookTrial

HP: Dict[str, Any] = {
    "lr": 0.005,
    "w0": 0.5,
    "global_batch_size": 4,
    "dataset_size": 8,  # epochs of 2 batches
    "val_size": 8,  # 2 validation batches of 2 on each of 2 ranks
    "val_batch_size": 2,
    "lr_step_mode": "STEP_EVERY_OPTIMIZER_STEP",
}
EXP_CONF: Dict[str, Any] = {
    "min_checkpoint_period": {"batches": 2},
    "min_validation_period": {"batches": 2},
    "scheduling_unit": 2,
}
RESUME_AT, MAX_BATCHES = 2, 6

pytestmark = pytest.mark.timeout(600)


def _in_process(tmp_path: Path, max_batches: int, latest: Any = None) -> pytorch.TrainResult:
    """The 1-slot run of the same trial, in this process; validation batches of 4 (2 batches,
    as each of 2 workers has with batches of 2)."""
    hp = {**HP, "val_batch_size": 4, "record_dir": str(tmp_path / "records")}
    conf = {**EXP_CONF, "hyperparameters": hp, "checkpoint_storage": {"host_path": str(tmp_path / "ckpt")}}
    with pytorch.init(hparams=hp, exp_conf=conf, trial_info=pytorch.TrialInfo(trial_seed=TRIAL_SEED)) as ctx:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pytorch.Trainer(HookTrial(ctx), ctx).fit(
                max_length=pytorch.Batch(max_batches),
                validation_period=pytorch.Batch(2),
                checkpoint_period=pytorch.Batch(2),
                reporting_period=pytorch.Batch(2),
                latest_checkpoint=latest,
            )


def _hooks(records: Dict[int, List[Dict[str, Any]]], rank: int) -> List[str]:
    (entry,) = [r for r in records[rank] if r["kind"] == "hooks"]
    return list(entry["hooks"])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    result = _in_process(tmp_path_factory.mktemp("first"), RESUME_AT)
    return str(result.latest_checkpoint)


@pytest.fixture(scope="module")
def one_slot(checkpoint: str, tmp_path_factory: pytest.TempPathFactory) -> List[str]:
    tmp = tmp_path_factory.mktemp("one_slot")
    _in_process(tmp, MAX_BATCHES, latest=checkpoint)
    return _hooks(read_records(str(tmp / "records")), 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_rank_sees_the_one_slot_hooks_and_only_the_chief_its_own(
    backend: str, checkpoint: str, one_slot: List[str], tmp_path: Path
) -> None:
    r = run(
        backend, 2, "hook_trials:HookTrial", HP, EXP_CONF, MAX_BATCHES, tmp_path, latest_checkpoint=checkpoint
    )
    assert r.code == 0 and r.result.status == "completed", describe(r)
    chief, other = _hooks(r.records, 0), _hooks(r.records, 1)

    # The chief's sequence is the 1-slot run's; the other rank's is the same without the
    # chief-only hooks.
    assert chief == one_slot
    assert other == [h for h in chief if h not in CHIEF_ONLY_HOOKS]
    assert {h for h in chief if h in CHIEF_ONLY_HOOKS} == set(CHIEF_ONLY_HOOKS)
    # Batches 2..5: 4 training forwards; validations after batches 4 and 6, 2 batches each.
    assert other.count("on_train_batch_start") == 4
    assert other.count("on_validation_start") == 2
    assert other.count("on_before_forward") == other.count("on_after_forward") == 4 + 2 * 2
    for name in ("setup", "on_before_load_checkpoint", "on_training_end", "on_trial_shutdown"):
        assert other.count(name) == chief.count(name) == 1, name
    # In the order of the table.
    first_seen: List[str] = []
    for hook in chief:
        if hook not in first_seen:
            first_seen.append(hook)
    assert first_seen == list(HOOKS)
