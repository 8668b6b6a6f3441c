"""A plain-Python ``Trainer.fit`` is recorded in the store as a local experiment: its
checkpoints are listed, the retention policy removes the others, pause/kill stop it, and
``activate`` refuses it.

The linear trial with lr = 0.03 validates (every 2 batches) to val_loss 1.355, 5.331, 0.2407,
0.9472: with ``checkpoint_policy: best`` it checkpoints at batches 2 and 6 (improvements) and
8 (the end); Determined's default policy keeps the best (6) and the latest (8).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional

import pytest

from determined_lite import pytorch
from determined_lite.store import Action, Store
from tests.cli_helpers import cli, describe
from tests.fixtures.experiments.linear.model_def import LinearTrial, closed_form, val_loss

HPARAMS = {"global_batch_size": 2, "lr": 0.03, "dataset_size": 8, "val_size": 4}
CONF = {
    "searcher": {"metric": "val_loss", "smaller_is_better": True},
    "reproducibility": {"experiment_seed": 3},
}


def _fit(exp_conf: Optional[Dict[str, Any]] = None, trial_cls: type = LinearTrial, **kw: Any) -> Any:
    with pytorch.init(hparams=HPARAMS, exp_conf={**CONF, **(exp_conf or {})}) as ctx:
        return pytorch.Trainer(trial_cls(ctx), ctx).fit(
            max_length=pytorch.Batch(8), validation_period=pytorch.Batch(2), progress=False, **kw
        )


@pytest.mark.slow
def test_checkpoints_are_listed_and_retention_keeps_the_best_and_the_latest(_det_lite_home):
    result = _fit()
    assert [c["total_batches"] for c in result.checkpoints] == [2, 6, 8]  # written
    listed = json.loads(cli("checkpoint", "list", "--json", check=True).stdout)
    assert [(c["experiment_id"], c["total_batches"]) for c in listed] == [(1, 6), (1, 8)]
    kept = {c["uuid"] for c in listed}
    root = _det_lite_home / "checkpoints"
    assert set(os.listdir(root)) == kept  # batch 2's directory is gone too
    for c in listed:
        w = closed_form(0.03, c["total_batches"], 2, 8)[-1]
        assert c["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9)
        meta = json.loads((root / c["uuid"] / "metadata.json").read_text())
        assert (meta["experiment_id"], meta["trial_id"]) == (1, c["trial_id"])
        assert meta["store"] == os.path.realpath(Store().path)

    exp = describe(1)
    assert (exp["kind"], exp["state"], exp["name"]) == ("local", "COMPLETED", "LinearTrial")
    (trial,) = exp["trials"]
    assert trial["hparams"] == HPARAMS and trial["state"] == "COMPLETED" and trial["total_batches"] == 8
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [2, 4, 6, 8]
    assert trial["best_validation"] == pytest.approx(val_loss(closed_form(0.03, 6, 2, 8)[-1], 4), rel=1e-9)
    assert "LinearTrial (local)" in cli("experiment", "list", check=True).stdout
    # Nothing for gc to do: the store and the disk agree.
    gc = cli("checkpoint", "gc", "--dry-run", check=True).stdout
    assert gc.strip() == "checkpoint gc (dry run): 0 in use, 0 registered, 0 removed, 0 forgotten"


def test_retention_follows_the_exp_conf(_det_lite_home):
    _fit({"checkpoint_storage": {"save_trial_best": 0, "save_trial_latest": 1}})
    (only,) = Store().checkpoints.list()
    assert only["total_batches"] == 8
    assert os.listdir(_det_lite_home / "checkpoints") == [only["uuid"]]


@pytest.mark.slow
def test_activate_refuses_a_local_run(_det_lite_home):
    _fit()
    Store().experiments.set_state(1, "PAUSED")
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 2
    assert "experiment 1 is a local run of Trainer.fit from Python" in proc.stderr
    assert "Traceback" not in proc.stderr


class _PauseAt(pytorch.PyTorchCallback):
    """Asks the store for a pause after ``n`` batches, as `det-lite experiment pause` would."""

    def __init__(self, n: int, action: str) -> None:
        self.n, self.action = n, action

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        store = Store()
        if store.trials.get(1)["total_batches"] >= self.n:
            store.requests.request(1, self.action)


class _Stopped(LinearTrial):
    def __init__(self, context, action: str = Action.PAUSE) -> None:
        super().__init__(context)
        self.stopper = _PauseAt(4, action)

    def build_callbacks(self):
        return {"stopper": self.stopper}


@pytest.mark.parametrize("action, state", [(Action.PAUSE, "PAUSED"), (Action.KILL, "CANCELED")])
def test_pause_and_kill_from_another_terminal_stop_the_run(_det_lite_home, action, state):
    result = _fit(trial_cls=lambda ctx: _Stopped(ctx, action), reporting_period=pytorch.Batch(2))
    # Asked after the report at batch 4; seen at the next report (6), as from another terminal.
    assert result.stopped_early and result.total_batches == 6
    exp = Store().experiments.describe(1)
    assert exp["state"] == state and exp["trials"][0]["state"] == state
    assert exp["requested_action"] is None and not exp["running"]
    # The run stopped with a checkpoint at batch 6; it stays for resuming from Python.
    assert 6 in [c["total_batches"] for c in exp["trials"][0]["checkpoints"]]


class _Broken(LinearTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        if batch_idx == 3:
            raise RuntimeError("boom")
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_an_error_leaves_the_run_in_error(_det_lite_home):
    with pytest.raises(RuntimeError, match="boom"):
        _fit(trial_cls=_Broken)
    exp = Store().experiments.describe(1)
    assert exp["state"] == "ERROR" and exp["trials"][0]["state"] == "ERROR"
    assert exp["pid"] is None


def test_a_store_that_cannot_be_written_costs_a_warning_not_the_run(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DET_LITE_HOME", str(blocker / "home"))  # under a file: cannot be created
    info = pytorch.TrialInfo(checkpoint_root=str(tmp_path / "ckpts"))
    with pytorch.init(
        hparams=HPARAMS, exp_conf=CONF, trial_info=info, enable_tensorboard_logging=False
    ) as ctx:
        result = pytorch.Trainer(LinearTrial(ctx), ctx).fit(max_length=pytorch.Batch(4), progress=False)
    assert result.total_batches == 4 and result.checkpoints
    assert "this run is not recorded in the det-lite store" in caplog.text


def test_record_false_keeps_the_run_out_of_the_store(_det_lite_home):
    result = _fit(record=False)
    assert Store().experiments.list() == []
    assert sorted(os.listdir(_det_lite_home / "checkpoints")) == sorted(c["uuid"] for c in result.checkpoints)


def test_runs_with_experiment_ids_are_not_recorded(_det_lite_home):
    info = pytorch.TrialInfo(trial_id=7, experiment_id=3)
    with pytorch.init(hparams=HPARAMS, exp_conf=CONF, trial_info=info) as ctx:
        pytorch.Trainer(LinearTrial(ctx), ctx).fit(max_length=pytorch.Batch(2), progress=False)
    assert Store().experiments.list() == []


def test_latest_and_best_checkpoint_name_only_checkpoints_still_on_disk(_det_lite_home):
    # Every validation checkpoints (2, 4, 6, 8); the policy keeps only the best (6).
    result = _fit(
        {"checkpoint_storage": {"save_trial_best": 1, "save_trial_latest": 0}}, checkpoint_policy="all"
    )
    by_batch = {c["total_batches"]: c for c in result.checkpoints}
    assert sorted(by_batch) == [2, 4, 6, 8]  # all written, and each says whether it is gone
    assert {b: c["deleted"] for b, c in by_batch.items()} == {2: True, 4: True, 6: False, 8: True}
    assert result.latest_checkpoint == result.best_checkpoint == by_batch[6]["path"]
    assert os.path.isdir(result.latest_checkpoint)


def test_best_checkpoint_is_the_best_validated_one(_det_lite_home):
    result = _fit(checkpoint_policy="all")  # Determined's retention: the best (6) and the latest (8)
    by_batch = {c["total_batches"]: c["path"] for c in result.checkpoints}
    assert (result.latest_checkpoint, result.best_checkpoint) == (by_batch[8], by_batch[6])
    with pytorch.init(hparams=HPARAMS, exp_conf={}) as ctx:  # no searcher metric: no best
        plain = pytorch.Trainer(LinearTrial(ctx), ctx).fit(max_length=pytorch.Batch(4), progress=False)
    assert plain.best_checkpoint is None and plain.latest_checkpoint == plain.checkpoints[-1]["path"]


def test_a_paused_run_says_which_checkpoint_to_resume_from(_det_lite_home, caplog):
    with caplog.at_level(logging.INFO, logger="determined_lite"):
        result = _fit(trial_cls=lambda ctx: _Stopped(ctx), reporting_period=pytorch.Batch(2))
    path = result.latest_checkpoint
    hint = f"resume from batch 6 with fit(latest_checkpoint={path!r})"
    assert f"local experiment 1 PAUSED: stopped at batch 6; {hint}" in caplog.messages
    resumed = _fit(latest_checkpoint=path)
    assert [m["total_batches"] for m in resumed.training_metrics] == [8]  # batches 7 and 8 only


@pytest.mark.parametrize("policy, warned", [(None, False), ("best", True)])
def test_checkpoint_policy_falls_back_to_all_without_a_metric(_det_lite_home, caplog, policy, warned):
    # Determined's local mode: no searcher metric, so "best" cannot be judged; a warning only
    # when the caller asked for "best" (the README's example asks for nothing).
    kw = {} if policy is None else {"checkpoint_policy": policy}
    with pytorch.init(hparams=HPARAMS, exp_conf={}) as ctx:
        result = pytorch.Trainer(LinearTrial(ctx), ctx).fit(
            max_length=pytorch.Batch(8), validation_period=pytorch.Batch(2), progress=False, **kw
        )
    assert [c["total_batches"] for c in result.checkpoints] == [2, 4, 6, 8]  # "all"
    assert ("checkpoint_policy='best' needs a searcher metric" in caplog.text) == warned
