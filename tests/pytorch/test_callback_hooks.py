"""The hook table against real runs, and det-lite's hooks beyond Determined's: ``setup``,
``on_before_load_checkpoint``, ``on_before_forward``/``on_after_forward``, ``on_training_end``
(success only), ``on_before_backward`` replacing the loss; ``Trainer``/``fit`` callbacks."""

from __future__ import annotations

import importlib
import inspect
import warnings
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint
from determined_lite.pytorch._callback import CallbackList, PyTorchCallback
from determined_lite.pytorch._forward_hooks import ForwardHooks
from determined_lite.pytorch._hooks import HOOK_TABLE, HOOKS, Hook
from tests.fixtures.cb_trial import GAMMA, LR, W0, AllHooksRecorder, Recorder, batch_xs, fit_cb_trial
from tests.fixtures.linear import expected_weights


class Weights(pytorch.PyTorchCallback):
    """The weight of CbTrial's model after every batch."""

    def __init__(self) -> None:
        self.model: Any = None
        self.values: List[float] = []

    def setup(self, context: pytorch.PyTorchTrialContext) -> None:
        self.model = context.models[0]

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.values.append(self.model.weight.item())


# --- the table ------------------------------------------------------------------------------


def test_hook_table_names_every_hook_once_and_where_it_is_called() -> None:
    methods = {
        name
        for name, value in vars(PyTorchCallback).items()
        if callable(value) and (name.startswith("on_") or name == "setup")
    }
    assert sorted(HOOKS) == sorted(methods)
    assert len(set(HOOKS)) == len(HOOKS)
    for hook in HOOK_TABLE:
        module_name, _, attr = hook.where.partition(".")
        obj: Any = importlib.import_module(f"determined_lite.pytorch.{module_name}")
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
        fired = f"Hook.{hook.hook.name}" in inspect.getsource(obj)
        assert fired, f"{hook.name} is not called in {hook.where}"
        if hook.alias_of:
            assert hook.alias_of in HOOKS


def test_the_hook_enum_the_table_and_the_loop_agree() -> None:
    # One enum names the hooks in firing order; the table has one row per member, in that
    # order; the loop's modules fire hooks by member only (no hook name as a string).
    assert [spec.hook for spec in HOOK_TABLE] == list(Hook)
    assert HOOKS == tuple(hook.value for hook in Hook)
    for module_name in {spec.where.split(".")[0] for spec in HOOK_TABLE}:
        source = inspect.getsource(importlib.import_module(f"determined_lite.pytorch.{module_name}"))
        for hook in Hook:
            assert f'"{hook.value}"' not in source, f"{module_name} names {hook.value} as a string"


def test_hook_order_of_a_real_run_is_the_table_order() -> None:
    # Epochs of 2 batches. First run: 2 batches and a checkpoint. Resumed run: batches 2..5,
    # report, validate and checkpoint every 2: every hook fires, deprecated aliases too.
    _, first = fit_cb_trial(max_batches=2, validation=None, hparams={"dataset_size": 8})
    rec = AllHooksRecorder("rec", [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fit_cb_trial(
            {"rec": rec},
            max_batches=6,
            validation=2,
            reporting=2,
            checkpoint_period=2,
            latest=first.checkpoints[-1]["path"],
            hparams={"dataset_size": 8},
        )
    first_seen: List[str] = []
    for hook in rec.hooks():
        if hook not in first_seen:
            first_seen.append(hook)
    assert first_seen == list(HOOKS)


# --- setup and the checkpoint hooks ---------------------------------------------------------


def test_setup_comes_first_with_the_context_and_before_any_loader_or_checkpoint() -> None:
    seen: List[Tuple[str, Any]] = []

    class Early(pytorch.PyTorchCallback):
        def setup(self, context: pytorch.PyTorchTrialContext) -> None:
            seen.append(("setup", context.models[0].weight.item()))

        def on_before_load_checkpoint(self, ckpt_path: str) -> None:
            seen.append(("before_load", ckpt_path))

        def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
            seen.append(("load_start", checkpoint["trainer"]["total_batches"]))

    _, first = fit_cb_trial(max_batches=2, validation=None)
    path = first.checkpoints[-1]["path"]
    trial, _ = fit_cb_trial({"early": Early()}, max_batches=4, validation=None, latest=path)
    # setup saw the fresh weight (0.5): the checkpoint was not restored yet.
    assert seen == [("setup", W0), ("before_load", path), ("load_start", 2)]


def test_on_before_load_checkpoint_can_refuse_before_anything_is_read() -> None:
    class Refuse(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.loaded = 0

        def on_before_load_checkpoint(self, ckpt_path: str) -> None:
            raise PermissionError(f"not from {ckpt_path}")

        def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
            self.loaded += 1

    _, first = fit_cb_trial(max_batches=2, validation=None)
    refuse = Refuse()
    with pytest.raises(pytorch.CallbackError, match=r"'refuse'.*on_before_load_checkpoint.*not from"):
        fit_cb_trial({"refuse": refuse}, max_batches=4, latest=first.checkpoints[-1]["path"])
    assert refuse.loaded == 0


# --- on_training_end: success only ----------------------------------------------------------


class StopAtValidation(pytorch.PyTorchCallback):
    def setup(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.context.set_stop_requested(True)


class FailAt(pytorch.PyTorchCallback):
    def __init__(self, batch_idx: int) -> None:
        self.batch_idx = batch_idx

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.batch_idx:
            raise ValueError("injected")


def test_training_end_runs_once_after_the_final_checkpoint_when_training_completes() -> None:
    rec = Recorder("rec", [])
    _, result = fit_cb_trial({"rec": rec}, max_batches=4, validation=None)
    hooks = rec.hooks()
    assert hooks.count("on_training_end") == 1
    assert hooks[-3:] == ["on_checkpoint_upload_end", "on_training_end", "on_trial_shutdown"]
    assert [a[0] for a in rec.args("on_checkpoint_upload_end")] == [result.checkpoints[-1]["uuid"]]


def test_training_end_runs_when_a_stop_was_honoured() -> None:
    rec = Recorder("rec", [])
    _, result = fit_cb_trial({"stop": StopAtValidation(), "rec": rec}, max_batches=8, validation=2)
    assert result.stopped_early and result.total_batches == 2
    assert rec.hooks()[-2:] == ["on_training_end", "on_trial_shutdown"]


def test_training_end_is_not_called_when_training_raised() -> None:
    rec = Recorder("rec", [])
    with pytest.raises(pytorch.CallbackError, match="injected"):
        fit_cb_trial({"rec": rec, "fail": FailAt(3)}, max_batches=8, checkpoint_period=2)
    hooks = rec.hooks()
    assert "on_training_end" not in hooks
    assert hooks.count("on_checkpoint_upload_end") == 1  # batch 2's checkpoint is still announced
    assert hooks[-1] == "on_trial_shutdown" and hooks.count("on_trial_shutdown") == 1


def test_an_error_in_training_end_fails_the_fit_and_shutdown_still_runs() -> None:
    class BadEnd(pytorch.PyTorchCallback):
        def on_training_end(self) -> None:
            raise OSError("report server gone")

    rec = Recorder("rec", [])
    with pytest.raises(pytorch.CallbackError, match=r"'bad'.*on_training_end.*report server gone"):
        fit_cb_trial({"bad": BadEnd(), "rec": rec}, max_batches=2, validation=None)
    assert rec.hooks()[-1] == "on_trial_shutdown"
    assert "on_training_end" not in rec.hooks()  # "rec" comes after "bad"


# --- forward hooks --------------------------------------------------------------------------


class Forwards(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.before: List[Tuple[Any, Tuple[Any, ...], Dict[str, Any]]] = []
        self.after: List[Tuple[Any, bool, torch.Tensor]] = []

    def on_before_forward(self, model: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        self.before.append((model, tuple(a.clone() for a in args), dict(kwargs)))

    def on_after_forward(self, model: Any, output: Any) -> None:
        self.after.append((model, model.training, output.detach().clone()))


def test_forward_hooks_fire_for_each_forward_in_training_and_validation() -> None:
    fw = Forwards()
    trial, _ = fit_cb_trial({"fw": fw}, max_batches=4, validation=4)
    # 4 training forwards, then one validation of 2 batches (x = 1..4 and 5, 6).
    assert len(fw.before) == len(fw.after) == 6
    assert all(model is trial.model for model, _, _ in fw.before + fw.after)  # type: ignore[operator]
    xs = [args[0].flatten().tolist() for _, args, _ in fw.before]
    assert xs == batch_xs(4) + [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0]]
    assert all(kwargs == {} for _, _, kwargs in fw.before)
    assert [training for _, training, _ in fw.after] == [True] * 4 + [False] * 2
    # Batch 0 runs with the initial weight: output = 0.5 x exactly.
    assert fw.after[0][2].flatten().tolist() == [W0 * x for x in xs[0]]
    # The hooks are gone after fit: a forward now calls nobody.
    trial.model(torch.ones(1, 1, dtype=torch.float64))
    assert len(fw.before) == len(fw.after) == 6


def test_forward_hooks_are_installed_only_when_a_callback_wants_them() -> None:
    model = torch.nn.Linear(2, 1)
    plain = CallbackList([("plain", pytorch.PyTorchCallback())], is_chief=True)
    assert ForwardHooks([model], plain).installed == 0

    class BeforeOnly(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.kwargs: List[Dict[str, Any]] = []

        def on_before_forward(self, model: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
            self.kwargs.append(kwargs)

    cb = BeforeOnly()
    hooks = ForwardHooks([model], CallbackList([("b", cb)], is_chief=True))
    assert hooks.installed == 1
    x = torch.ones(3, 2)
    model(input=x)  # keyword arguments reach the callback
    assert len(cb.kwargs) == 1 and cb.kwargs[0]["input"] is x
    hooks.remove()
    model(x)
    assert len(cb.kwargs) == 1


# --- on_before_backward may replace the loss ------------------------------------------------


class ScaleLoss(pytorch.PyTorchCallback):
    """The reference's example: scale the loss before backward."""

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.received: List[float] = []

    def on_before_backward(self, loss: torch.Tensor) -> torch.Tensor:
        self.received.append(loss.item())
        return loss * self.factor


def test_a_replaced_loss_is_backpropagated_and_the_reported_loss_is_unchanged() -> None:
    weights, first, second = Weights(), ScaleLoss(2.0), ScaleLoss(3.0)
    after = Recorder("after", [])
    _, result = fit_cb_trial(
        {"w": weights, "first": first, "second": second, "after": after}, max_batches=4, validation=None
    )
    # Loss × 6 under SGD is learning rate × 6.
    lrs = [6 * LR * GAMMA**i for i in range(4)]
    assert weights.values == pytest.approx(expected_weights(W0, lrs, batch_xs(4)), rel=1e-12)
    # Batch 0: w = 0.5, x = 1..4: loss = mean((1.5 x)^2) = 2.25 * 7.5, reported unscaled.
    losses = [m["loss"].item() for m, _ in after.args("on_train_batch_end")]
    assert losses[0] == pytest.approx(16.875, rel=1e-12)
    assert result.training_metrics[0]["metrics"]["loss"] == pytest.approx((losses[0] + losses[1]) / 2)
    assert second.received[0] == pytest.approx(2 * first.received[0], rel=1e-12)  # chained
    assert after.args("on_after_backward")[0][0].item() == pytest.approx(16.875, rel=1e-12)


def test_a_replacement_that_is_not_a_tensor_names_the_callback() -> None:
    class Bad(pytorch.PyTorchCallback):
        def on_before_backward(self, loss: torch.Tensor) -> Any:
            return 2.0

    with pytest.raises(pytorch.CallbackError, match=r"'bad'.*returned a float from on_before_backward"):
        fit_cb_trial({"bad": Bad()}, max_batches=1, validation=None)


# --- Trainer(callbacks=) and fit(callbacks=) ------------------------------------------------


class Counter(pytorch.PyTorchCallback):
    def __init__(self, log: Optional[List[str]] = None, tag: str = "") -> None:
        self.log, self.tag = log, tag
        self.batches = 0

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.batches += 1
        if self.log is not None:
            self.log.append(self.tag)

    def state_dict(self) -> Dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.batches = state_dict["batches"]


def test_trainer_and_fit_callbacks_run_after_the_trials_and_before_globals() -> None:
    log: List[str] = []
    glob = Counter(log, "global")
    with glob:
        _, result = fit_cb_trial(
            {"own": Counter(log, "own")},
            max_batches=2,
            validation=None,
            trainer_callbacks=[Counter(log, "trainer1"), Counter(log, "trainer2")],
            fit_callbacks={"mine": Counter(log, "fit")},
        )
    assert log == ["own", "trainer1", "trainer2", "fit", "global"] * 2
    state, _ = _checkpoint.read_checkpoint(result.checkpoints[-1]["path"])
    # A list is named by class (#2 for a repeat), a dict keeps its names.
    names = {n for n in state["callbacks"] if not n.startswith("_core.")}
    assert names == {"own", "Counter", "Counter#2", "mine", "global:Counter"}
    assert state["callbacks"]["Counter#2"] == {"batches": 2}

    # The same names restore the same state on resume.
    again = Counter()
    fit_cb_trial(max_batches=3, validation=None, latest=result.checkpoints[-1]["path"], fit_callbacks=[again])
    assert again.batches == 2 + 1


def test_trainer_callbacks_must_be_a_list_or_a_dict_of_callbacks() -> None:
    with pytest.raises(TypeError, match="list or a dict"):
        fit_cb_trial(max_batches=1, trainer_callbacks=Counter())
    with pytest.raises(TypeError, match="callback 'object' must be a determined_lite.pytorch.PyTorch"):
        fit_cb_trial(max_batches=1, fit_callbacks=[object()])
    with pytest.raises(ValueError, match=r"share the name\(s\) \['Counter'\]"):
        fit_cb_trial(max_batches=1, trainer_callbacks=[Counter()], fit_callbacks=[Counter()])

