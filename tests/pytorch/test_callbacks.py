"""Callbacks: hook order and counts, global registration, state on resume, errors, deprecations,
and the metrics that reporting hooks receive."""

from __future__ import annotations

import collections
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint
from determined_lite.pytorch._callback import global_callbacks
from tests.fixtures.cb_trial import CbTrial, Recorder


@pytest.fixture(autouse=True)
def _home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LITE_HOME", str(tmp_path / "home"))


@pytest.fixture(autouse=True)
def _no_leftover_globals() -> Any:
    before = global_callbacks()
    yield
    leaked = [cb for cb in global_callbacks() if cb not in before]
    assert not leaked, f"a test left global callbacks registered: {leaked}"


def _fit(
    callbacks: Optional[Dict[str, pytorch.PyTorchCallback]] = None,
    *,
    max_batches: int = 8,
    k: int = 1,
    validation: Optional[int] = 4,
    reporting: int = 2,
    checkpoint_period: Optional[int] = None,
    latest: Optional[str] = None,
    core: Sequence[Tuple[str, pytorch.PyTorchCallback]] = (),
) -> Tuple[CbTrial, pytorch.TrainResult]:
    with pytorch.init(
        hparams={"global_batch_size": 4},
        exp_conf={"reproducibility": {"experiment_seed": 3}},
        aggregation_frequency=k,
    ) as ctx:
        trial = CbTrial(ctx, callbacks)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(max_batches),
            reporting_period=pytorch.Batch(reporting),
            validation_period=pytorch.Batch(validation) if validation else None,
            checkpoint_period=pytorch.Batch(checkpoint_period) if checkpoint_period else None,
            latest_checkpoint=latest,
            core_callbacks=core,
        )
    return trial, result


def _expected_hooks(
    max_batches: int, epoch_len: int, k: int, validation: int, reporting: int, checkpoint: int
) -> List[str]:
    """The hook sequence of a fresh run (validation: 2 batches; periods divide max_batches)."""
    seq = ["setup", "on_trial_startup", "on_training_start"]
    unflushed = False  # a checkpoint is announced (upload_end) at the next report, checkpoint or end
    for i in range(max_batches):
        done = i + 1
        if i % epoch_len == 0:
            seq.append("on_training_epoch_start")
        seq += ["on_train_batch_start", "on_before_forward", "on_after_forward"]
        seq += ["on_before_backward", "on_after_backward"]
        if done % k == 0:
            seq += [
                "on_before_optimizer_step",
                "on_after_optimizer_step",
                "on_before_optimizer_zero_grad",
                "on_after_optimizer_zero_grad",
                "on_before_scheduler_step",  # STEP_EVERY_OPTIMIZER_STEP
                "on_after_scheduler_step",
            ]
        seq.append("on_train_batch_end")
        if done % epoch_len == 0:
            seq.append("on_training_epoch_end")
        if done % reporting == 0 or done % validation == 0 or done % checkpoint == 0:
            seq += ["on_checkpoint_upload_end"] * unflushed + ["on_training_workload_end"]
            unflushed = False
        if done % validation == 0:
            seq += [
                "on_validation_start",
                "on_validation_epoch_start",
                "on_validation_batch_start",
                "on_before_forward",
                "on_after_forward",
                "on_validation_batch_end",
                "on_validation_batch_start",
                "on_before_forward",
                "on_after_forward",
                "on_validation_batch_end",
                "on_validation_epoch_end",
                "on_validation_end",
            ]
        if done % checkpoint == 0:
            seq += ["on_checkpoint_save_start", "on_checkpoint_write_end"]
            unflushed = True
    seq += ["on_checkpoint_upload_end"] * unflushed + ["on_training_end", "on_trial_shutdown"]
    return seq


# --- order and counts -----------------------------------------------------------------------


def test_hook_order_core_then_trial_then_global_and_counts() -> None:
    log: List[Tuple[str, str]] = []
    core = Recorder("core", log)
    user_b, user_a = Recorder("b", log), Recorder("a", log)
    glob1, glob2 = Recorder("g1", log), Recorder("g2", log)
    h1 = pytorch.register_global_callback(glob1)
    h2 = pytorch.register_global_callback(glob2)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*deprecated; use", category=DeprecationWarning)
            trial, result = _fit(
                {"b": user_b, "a": user_a},  # insertion order, not alphabetical
                k=2,
                checkpoint_period=4,
                core=[("_core.rec", core)],
            )
    finally:
        h1.remove()
        h2.remove()

    # 2 epochs of 4 batches, k=2 (4 optimizer steps), report every 2, validate and checkpoint every 4.
    expected = _expected_hooks(8, 4, k=2, validation=4, reporting=2, checkpoint=4)
    assert core.hooks() == expected
    order = ["core", "b", "a", "g1", "g2"]
    assert log == [(name, hook) for hook in expected for name in order]

    counts = collections.Counter(core.hooks())
    assert counts["setup"] == 1
    assert counts["on_trial_startup"] == 1
    assert counts["on_training_start"] == 1
    assert counts["on_training_epoch_start"] == 2
    assert counts["on_training_epoch_end"] == 2
    assert counts["on_train_batch_start"] == 8
    assert counts["on_train_batch_end"] == 8
    assert counts["on_before_backward"] == counts["on_after_backward"] == 8
    assert counts["on_before_optimizer_step"] == counts["on_after_optimizer_step"] == 4
    assert counts["on_before_optimizer_zero_grad"] == counts["on_after_optimizer_zero_grad"] == 4
    assert counts["on_before_scheduler_step"] == counts["on_after_scheduler_step"] == 4
    assert counts["on_training_workload_end"] == 4
    assert counts["on_validation_start"] == counts["on_validation_end"] == 2
    assert counts["on_validation_epoch_start"] == counts["on_validation_epoch_end"] == 2
    assert counts["on_validation_batch_start"] == counts["on_validation_batch_end"] == 4
    assert counts["on_checkpoint_save_start"] == 2
    assert counts["on_checkpoint_write_end"] == counts["on_checkpoint_upload_end"] == 2
    assert counts["on_checkpoint_load_start"] == counts["on_before_load_checkpoint"] == 0
    assert counts["on_before_forward"] == counts["on_after_forward"] == 8 + 4  # 8 train, 4 validation
    assert counts["on_training_end"] == 1
    assert counts["on_trial_shutdown"] == 1

    # Arguments.
    assert core.args("setup") == [(trial.context,)]
    assert core.args("on_trial_startup") == [(0, None)]
    assert core.args("on_training_epoch_start") == [(0,), (1,)]
    assert core.args("on_training_epoch_end") == [(0,), (1,)]
    starts = core.args("on_train_batch_start")
    assert [idx for _, idx in starts] == list(range(8))
    for batch, idx in starts:  # no shuffle: batch i holds x = 4(i mod 4)+1 .. 4(i mod 4)+4
        assert batch[0].flatten().tolist() == [4.0 * (idx % 4) + j for j in (1, 2, 3, 4)]
    ends = core.args("on_train_batch_end")
    assert [idx for _, idx in ends] == list(range(8))
    for metrics, idx in ends:
        assert set(metrics) == {"loss", "bidx"}
        assert metrics["bidx"].item() == idx
    for (loss,) in core.args("on_before_backward"):
        assert isinstance(loss, torch.Tensor) and loss.ndim == 0
    for (params,) in core.args("on_before_optimizer_step"):
        assert len(params) == 1 and params[0] is trial.model.weight
    for hook in ("on_after_optimizer_step", "on_before_optimizer_zero_grad", "on_after_optimizer_zero_grad"):
        assert all(args[0] is trial.opt for args in core.args(hook)), hook
    for hook in ("on_before_scheduler_step", "on_after_scheduler_step"):
        assert all(args[0] is trial.sched for args in core.args(hook)), hook
    assert [idx for _, idx in core.args("on_validation_batch_start")] == [0, 1, 0, 1]
    assert [idx for _, idx in core.args("on_validation_batch_end")] == [0, 1, 0, 1]
    for (outputs,) in core.args("on_validation_epoch_end"):
        assert [o["xmean"].item() for o in outputs] == [2.5, 5.5]

    assert [c["total_batches"] for c in result.checkpoints] == [4, 8]
    assert [a[0] for a in core.args("on_checkpoint_write_end")] == [c["path"] for c in result.checkpoints]
    assert [a[0] for a in core.args("on_checkpoint_upload_end")] == [c["uuid"] for c in result.checkpoints]
    for (state,) in core.args("on_checkpoint_save_start"):
        assert isinstance(state, dict) and "callbacks" in state
    for cb in (user_b, user_a, glob1, glob2):
        assert cb.hooks() == expected


def test_trial_startup_args_on_resume() -> None:
    _, first = _fit(max_batches=4, validation=None)
    ckpt = first.checkpoints[-1]
    rec = Recorder("rec", [])
    _fit({"rec": rec}, max_batches=8, validation=None, latest=ckpt["path"])
    assert rec.args("on_trial_startup") == [(4, ckpt["uuid"])]
    assert ckpt["uuid"] == os.path.basename(ckpt["path"])
    hooks = rec.hooks()
    # Restored before startup; training resumes at batch 4 = the start of epoch 1.
    assert hooks[:5] == [
        "setup",
        "on_before_load_checkpoint",
        "on_checkpoint_load_start",
        "on_trial_startup",
        "on_training_start",
    ]
    assert rec.args("on_before_load_checkpoint") == [(ckpt["path"],)]
    assert [idx for _, idx in rec.args("on_train_batch_start")] == [4, 5, 6, 7]
    assert rec.args("on_training_epoch_start") == [(1,)]
    (loaded,) = rec.args("on_checkpoint_load_start")
    assert loaded[0]["trainer"]["total_batches"] == 4


def test_resume_mid_epoch_has_no_epoch_start() -> None:
    _, first = _fit(max_batches=2, validation=None)
    rec = Recorder("rec", [])
    _fit({"rec": rec}, max_batches=8, validation=None, latest=first.checkpoints[-1]["path"])
    assert rec.args("on_trial_startup")[0][0] == 2
    assert rec.args("on_training_epoch_start") == [(1,)]
    assert rec.args("on_training_epoch_end") == [(0,), (1,)]


# --- global callbacks -----------------------------------------------------------------------


def test_register_global_callback_handle_removes_it() -> None:
    log: List[Tuple[str, str]] = []
    glob = Recorder("glob", log)
    handle = pytorch.register_global_callback(glob)
    try:
        assert isinstance(handle, pytorch.RemovableHandle)
        assert global_callbacks()[-1] is glob
        _fit({"mine": Recorder("mine", log)}, max_batches=2, validation=None)
    finally:
        handle.remove()
    assert glob not in global_callbacks()
    seen = glob.hooks()
    assert seen[0] == "setup" and seen[-1] == "on_trial_shutdown"
    assert seen.count("on_train_batch_start") == 2
    # Global callbacks run after the trial's own, for every hook.
    for i in range(0, len(log), 2):
        assert log[i][0] == "mine" and log[i + 1] == ("glob", log[i][1])

    _fit(max_batches=2, validation=None)
    assert glob.hooks() == seen  # removed: no new calls
    handle.remove()  # removing twice is harmless


def test_global_callback_as_context_manager() -> None:
    glob = Recorder("glob", [])
    with glob as entered:
        assert entered is glob
        assert glob in global_callbacks()
        _fit(max_batches=2, validation=None)
    assert glob not in global_callbacks()
    assert glob.hooks().count("on_train_batch_start") == 2
    calls = len(glob.calls)
    _fit(max_batches=2, validation=None)
    assert len(glob.calls) == calls


def test_register_global_callback_rejects_non_callbacks() -> None:
    with pytest.raises(TypeError, match="PyTorchCallback"):
        pytorch.register_global_callback(object())  # type: ignore[arg-type]


# --- state on resume ------------------------------------------------------------------------


class Stateful(pytorch.PyTorchCallback):
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.batches = 0
        self.loaded: List[Dict[str, Any]] = []

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.batches += 1

    def state_dict(self) -> Dict[str, Any]:
        return {"tag": self.tag, "batches": self.batches}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.loaded.append(dict(state_dict))
        self.batches = state_dict["batches"]


def test_callback_state_restored_by_name() -> None:
    first, second = Stateful("A"), Stateful("B")
    _, result = _fit({"first": first, "second": second}, max_batches=3, validation=None)
    path = result.checkpoints[-1]["path"]
    state, _ = _checkpoint.read_checkpoint(path)
    assert state["callbacks"]["first"] == {"tag": "A", "batches": 3}
    assert state["callbacks"]["second"] == {"tag": "B", "batches": 3}

    # Different order, new tags, and a callback that was not in the checkpoint.
    r_second, r_first, r_new = Stateful("x"), Stateful("y"), Stateful("z")
    _fit({"second": r_second, "first": r_first, "new": r_new}, max_batches=8, validation=None, latest=path)
    assert r_first.loaded == [{"tag": "A", "batches": 3}]
    assert r_second.loaded == [{"tag": "B", "batches": 3}]
    assert r_new.loaded == []
    assert r_first.batches == r_second.batches == 8
    assert r_new.batches == 5


def test_callback_load_state_dict_error_names_callback(tmp_path: Any) -> None:
    _, result = _fit({"cb": Stateful("A")}, max_batches=2, validation=None)

    class Broken(Stateful):
        def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
            raise KeyError("nope")

    with pytest.raises(pytorch.CallbackError, match=r"'cb'.*load_state_dict") as info:
        _fit({"cb": Broken("B")}, max_batches=4, validation=None, latest=result.checkpoints[-1]["path"])
    assert isinstance(info.value.__cause__, KeyError)


# --- errors ---------------------------------------------------------------------------------


class Boom(pytorch.PyTorchCallback):
    def __init__(self, at: int) -> None:
        self.at = at
        self.error: Optional[Exception] = None
        self.shutdowns = 0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.at:
            self.error = ValueError("kaboom")
            raise self.error

    def on_trial_shutdown(self) -> None:
        self.shutdowns += 1


def test_hook_error_names_callback_and_hook_and_shutdown_runs() -> None:
    boom = Boom(at=2)
    after = Recorder("after", [])
    with pytest.raises(pytorch.CallbackError) as info:
        _fit({"boom": boom, "after": after}, max_batches=8)
    message = str(info.value)
    assert "'boom'" in message
    assert "on_train_batch_start" in message
    assert "kaboom" in message
    assert info.value.__cause__ is boom.error
    assert isinstance(info.value, RuntimeError)
    # Shutdown still ran, once, on every callback.
    assert boom.shutdowns == 1
    assert after.hooks().count("on_trial_shutdown") == 1
    assert after.hooks()[-1] == "on_trial_shutdown"
    # "after" comes after "boom", so it never saw batch 2 start.
    assert [idx for _, idx in after.args("on_train_batch_start")] == [0, 1]


def test_error_in_shutdown_hook_is_a_callback_error() -> None:
    class BadShutdown(pytorch.PyTorchCallback):
        def on_trial_shutdown(self) -> None:
            raise OSError("disk gone")

    with pytest.raises(pytorch.CallbackError, match=r"'bad'.*on_trial_shutdown.*disk gone"):
        _fit({"bad": BadShutdown()}, max_batches=2, validation=None)


def test_a_checkpoint_written_before_a_failure_is_still_announced() -> None:
    # Checkpoint at batch 4 (flushed in the background), failure at batch 5, before any report.
    boom = Boom(at=5)
    rec = Recorder("rec", [])
    with pytest.raises(pytorch.CallbackError, match="kaboom"):
        _fit({"rec": rec, "boom": boom}, max_batches=8, validation=None, reporting=8, checkpoint_period=4)
    hooks = rec.hooks()
    assert hooks.count("on_checkpoint_write_end") == hooks.count("on_checkpoint_upload_end") == 1
    (path,) = [a[0] for a in rec.args("on_checkpoint_write_end")]
    assert [a[0] for a in rec.args("on_checkpoint_upload_end")] == [os.path.basename(path)]
    assert hooks.index("on_checkpoint_upload_end") < hooks.index("on_trial_shutdown")


def test_an_error_announcing_the_last_checkpoint_does_not_hide_the_trial_error() -> None:
    class BadUpload(pytorch.PyTorchCallback):
        def on_checkpoint_upload_end(self, uuid: str) -> None:
            raise OSError("store gone")

    with pytest.raises(pytorch.CallbackError, match="kaboom"):
        _fit(
            {"bad": BadUpload(), "boom": Boom(at=5)},
            max_batches=8,
            validation=None,
            reporting=8,
            checkpoint_period=4,
        )


# --- deprecations ---------------------------------------------------------------------------


def test_deprecated_on_checkpoint_end_warns_and_still_runs() -> None:
    class Old(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.dirs: List[str] = []

        def on_checkpoint_end(self, checkpoint_dir: str) -> None:
            self.dirs.append(checkpoint_dir)

    old = Old()
    with pytest.warns(DeprecationWarning, match=r"'old'.*on_checkpoint_end.*on_checkpoint_write_end"):
        _, result = _fit({"old": old}, max_batches=4, validation=None, checkpoint_period=2)
    assert old.dirs == [c["path"] for c in result.checkpoints]
    assert len(old.dirs) == 2


def test_deprecated_validation_step_hooks_warn_and_alias() -> None:
    class OldVal(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.starts = 0
            self.ends: List[Dict[str, Any]] = []

        def on_validation_step_start(self) -> None:
            self.starts += 1

        def on_validation_step_end(self, metrics: Dict[str, Any]) -> None:
            self.ends.append(metrics)

    cb = OldVal()
    with pytest.warns(DeprecationWarning) as record:
        _, result = _fit({"oldval": cb}, max_batches=8, validation=4)
    messages = " ".join(str(w.message) for w in record)
    assert "on_validation_step_start" in messages and "on_validation_step_end" in messages
    assert cb.starts == 2
    assert cb.ends == [v["metrics"] for v in result.validation_metrics]


# --- metrics given to reporting hooks -------------------------------------------------------


def test_training_workload_end_gets_averages_and_batch_metrics() -> None:
    rec = Recorder("rec", [])
    _, result = _fit({"rec": rec}, max_batches=5, reporting=2, validation=None)
    ends = rec.args("on_training_workload_end")
    # Chunks [0, 1], [2, 3] and the final partial chunk [4].
    assert [avg["bidx"] for avg, _ in ends] == [0.5, 2.5, 4.0]
    assert [[m["bidx"] for m in batch] for _, batch in ends] == [[0.0, 1.0], [2.0, 3.0], [4.0]]
    batch_losses = [metrics["loss"].item() for metrics, _ in rec.args("on_train_batch_end")]
    assert [[m["loss"] for m in batch] for _, batch in ends] == [
        batch_losses[0:2],
        batch_losses[2:4],
        batch_losses[4:5],
    ]
    for avg, batch in ends:
        assert avg["loss"] == sum(m["loss"] for m in batch) / len(batch)
        assert all(type(m["loss"]) is np.float64 for m in batch)  # numpy values, as in Determined
    assert [avg for avg, _ in ends] == [m["metrics"] for m in result.training_metrics]
    assert [m["total_batches"] for m in result.training_metrics] == [2, 4, 5]


def test_validation_end_gets_reduced_metrics() -> None:
    rec = Recorder("rec", [])
    _, result = _fit({"rec": rec}, max_batches=8, validation=4)
    ends = rec.args("on_validation_end")
    # Batches of 4 and 2 records with mean x 2.5 and 5.5: sample-weighted mean 3.5 (not 4.0).
    assert ends == [({"xmean": 3.5},), ({"xmean": 3.5},)]
    assert [v["metrics"] for v in result.validation_metrics] == [{"xmean": 3.5}, {"xmean": 3.5}]
    assert [v["total_batches"] for v in result.validation_metrics] == [4, 8]


def test_checkpoint_save_start_may_add_keys_seen_again_on_load() -> None:
    class Extra(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.loaded: List[Any] = []

        def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
            checkpoint["extra"] = {"note": "hello", "tensor": torch.arange(3)}

        def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
            self.loaded.append(checkpoint.get("extra"))

    _, result = _fit({"extra": Extra()}, max_batches=2, validation=None)
    path = result.checkpoints[-1]["path"]
    state, _ = _checkpoint.read_checkpoint(path)
    assert state["extra"]["note"] == "hello"
    assert torch.equal(state["extra"]["tensor"], torch.arange(3))

    again = Extra()
    _fit({"extra": again}, max_batches=4, validation=None, latest=path)
    assert len(again.loaded) == 1
    assert again.loaded[0]["note"] == "hello" and torch.equal(again.loaded[0]["tensor"], torch.arange(3))


def test_chief_only_hooks_skipped_on_other_workers() -> None:
    from determined_lite.pytorch._callback import CallbackList
    from determined_lite.pytorch._hooks import CHIEF_ONLY_HOOKS, Hook

    assert CHIEF_ONLY_HOOKS == {
        "on_checkpoint_save_start",
        "on_checkpoint_write_end",
        "on_checkpoint_upload_end",
        "on_checkpoint_end",
    }
    for is_chief in (True, False):
        rec = Recorder("r", [])
        cbs = CallbackList([("r", rec)], is_chief=is_chief)
        cbs.call(Hook.ON_CHECKPOINT_SAVE_START, {})
        cbs.call(Hook.ON_CHECKPOINT_WRITE_END, "/x")
        cbs.call(Hook.ON_CHECKPOINT_UPLOAD_END, "u")
        cbs.call(Hook.ON_TRAIN_BATCH_END, {}, 0)
        expected = (
            ["on_checkpoint_save_start", "on_checkpoint_write_end", "on_checkpoint_upload_end"]
            if is_chief
            else []
        )
        assert rec.hooks() == expected + ["on_train_batch_end"]
        assert cbs.has(Hook.ON_CHECKPOINT_WRITE_END) is is_chief


def test_callback_list_rejects_duplicate_names_and_non_callbacks() -> None:
    from determined_lite.pytorch._callback import CallbackList

    rec = Recorder("r", [])
    with pytest.raises(ValueError, match=r"\['same'\]"):
        CallbackList([("same", rec), ("same", Recorder("s", []))], is_chief=True)
    with pytest.raises(TypeError, match=r"callback 'bad' must be a determined_lite.pytorch.PyTorchCallback"):
        _fit({"bad": object()}, max_batches=2)  # type: ignore[dict-item]
