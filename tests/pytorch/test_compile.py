"""``optimizations.compile``: torch.compile under the static-graph contract
(``shared/reference/static-graphs.txt``; ``determined_lite/pytorch/_compile.py``).

The model is ``linear.py``'s one weight (float64, MSE, SGD), whose weight after every batch has a
closed form (``expected_weights``); ``CompileTrial`` puts Python state in its forward. Most runs
use the ``aot_eager`` backend (torch's graph capture and AOTAutograd, no C++ build); one uses
inductor. Tolerance of compiled runs against eager ones and the closed form: 1e-9 relative
(float64; the graph may reorder floating-point operations), bfloat16 AMP: 1e-2.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch

from determined_lite import pytorch
from determined_lite.config import CompileSettings, ConfigError
from determined_lite.pytorch._compile import (
    CompilerMissingError,
    GraphChangedError,
    compiled_forward,
)
from determined_lite.searcher import validate_config
from tests.fixtures.compile_trials import CompileTrial
from tests.fixtures.linear import expected_weights
from tests.timing import budget

REL = 1e-9
HP: Dict[str, Any] = {"lr": 0.01, "w0": 0.5, "global_batch_size": 4, "dataset_size": 10, "val_size": 5}
AOT = {"backend": "aot_eager"}


@pytest.fixture(autouse=True)
def _home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LITE_HOME", str(tmp_path / "home"))


def _train(
    batches: int,
    compile: Any = None,  # noqa: A002
    *,
    k: int = 1,
    latest: Optional[str] = None,
    validation: Optional[int] = None,
    **hparams: Any,
) -> Tuple[CompileTrial, pytorch.TrainResult]:
    exp_conf = {
        "reproducibility": {"experiment_seed": 1},
        "checkpoint_storage": {"save_trial_latest": 100},
        "optimizations": {"aggregation_frequency": k},
    }
    with pytorch.init(hparams={**HP, **hparams}, exp_conf=exp_conf, compile=compile) as ctx:
        trial = CompileTrial(ctx)
        result = pytorch.Trainer(trial, ctx).fit(
            max_length=pytorch.Batch(batches),
            validation_period=pytorch.Batch(validation) if validation else None,
            checkpoint_period=pytorch.Batch(2),
            latest_checkpoint=latest,
            progress=False,
            record=False,
        )
    return trial, result


def _batches(n: int, size: int = HP["dataset_size"], bs: int = 4) -> List[List[float]]:
    """The x of every record of the first ``n`` batches (unshuffled, x = i + 1, epochs restart)."""
    xs = [float(i + 1) for i in range(size)]
    epoch = [xs[i : i + bs] for i in range(0, size, bs)]
    return [epoch[i % len(epoch)] for i in range(n)]


def _checkpoint(result: pytorch.TrainResult, batches: int) -> str:
    (path,) = [c["path"] for c in result.checkpoints if c["total_batches"] == batches]
    return str(path)


# --- 1. config and the Python switch --------------------------------------------------------------


BASE = {
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 4},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 2}},
}


@pytest.mark.parametrize(
    "value, message",
    [
        ({"enabled": "yes"}, "optimizations.compile.enabled: expected true or false, got 'yes'"),
        ({"mode": "fast"}, "optimizations.compile.mode: expected 'default', 'reduce-overhead'"),
        ({"enabld": True}, "optimizations.compile.enabld: unknown field (did you mean 'enabled'?)"),
        ({"backend": ""}, "optimizations.compile.backend"),
        ({"backend": "aot_eager", "mode": "max-autotune"}, "mode: applies to backend 'inductor' only"),
        (
            {"retrace_every_iteration": 1},
            "optimizations.compile.retrace_every_iteration: expected true or false",
        ),
    ],
)
def test_bad_config_values_are_one_line_errors(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_config({**BASE, "optimizations": {"compile": value}}, source="experiment.yaml")
    assert str(e.value).startswith("experiment.yaml: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_config_defaults_and_shorthand() -> None:
    settings = validate_config({**BASE, "optimizations": {"compile": True}}).training_settings().compile
    assert settings.enabled and settings.backend == "inductor" and settings.mode is None
    assert not settings.fullgraph and not settings.dynamic and not settings.retrace_every_iteration
    assert not validate_config(BASE).training_settings().compile.enabled


@pytest.mark.slow
@pytest.mark.parametrize(
    "value, enabled, backend",
    [
        (True, True, "inductor"),
        ({"backend": "aot_eager"}, True, "aot_eager"),  # options without "enabled" mean on
        ({"enabled": False, "backend": "aot_eager"}, False, "aot_eager"),
        (False, False, "inductor"),
        (CompileSettings(enabled=True, backend="eager"), True, "eager"),
    ],
)
def test_python_switch_replaces_the_config_section(value: Any, enabled: bool, backend: str) -> None:
    exp_conf = {"optimizations": {"aggregation_frequency": 2, "compile": {"enabled": True, "dynamic": True}}}
    with pytorch.init(hparams=HP, exp_conf=exp_conf, compile=value) as ctx:
        settings = ctx.harness.settings.compile
        assert (settings.enabled, settings.backend, settings.dynamic) == (enabled, backend, False)
        assert ctx.get_experiment_config()["optimizations"]["aggregation_frequency"] == 2
        model = ctx.wrap_model(torch.nn.Linear(2, 1))
        assert (compiled_forward(model) is not None) == enabled


@pytest.mark.slow
def test_python_switch_errors_and_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"^init\(compile=...\)\.mode: expected one of default"):
        with pytorch.init(hparams=HP, compile={"mode": "fast"}):
            pass
    with pytest.raises(ValueError, match="optimizations.compile.backend: expected one of .*got 'nope'"):
        _train(1, {"backend": "nope"})


# --- 2. trace once, retrace every iteration -------------------------------------------------------


@pytest.mark.slow
def test_model_is_compiled_in_place_and_graphs_are_captured_once() -> None:
    # 10 records, batch 4: epochs of 4 + 4 + 2 (a smaller last batch); validation on 5 records in
    # batches of 2 (2 + 2 + 1) in eval mode. Each (mode, batch size) traces once, none retraces.
    trial, result = _train(8, AOT, validation=4)
    compiled = compiled_forward(trial.net)
    assert compiled is not None and trial.model is trial.net  # the trial keeps its module
    assert type(trial.net).__name__ == "FlagNet"
    modes = sorted((key[0], key[3]) for key in compiled.graphs)
    assert modes == [(False, (1,)), (False, (2,)), (True, (2,)), (True, (4,))]
    assert all(len(g) == 1 for g in compiled.graphs.values())
    assert len(compiled.backend.captured) == 4  # traced once per key, never again
    assert trial.recorder.weights == pytest.approx(expected_weights(0.5, 0.01, _batches(8)), rel=REL)
    # Validation ran the eval-mode graph: mean((w x - 2 x)^2) over x = 1..5 is 11 (w - 2)^2.
    ws = trial.recorder.weights
    val = [m["metrics"]["val_loss"] for m in result.validation_metrics]
    assert val == pytest.approx([11 * (ws[3] - 2) ** 2, 11 * (ws[7] - 2) ** 2], rel=REL)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hparams, cause",
    [
        ({"flip_at": 3}, "guard failed: self.double == False"),  # a Python branch flips
        ({"loop_at": 2}, "self.repeats == 1"),  # a loop count changes
        ({"count": 1}, "self.calls == 0"),  # Python state the graph read changes
    ],
)
def test_trace_once_a_changed_graph_is_an_error_naming_model_and_cause(
    hparams: Dict[str, Any], cause: str
) -> None:
    with pytest.raises(GraphChangedError) as e:
        _train(6, AOT, **hparams)
    message = str(e.value)
    assert "FlagNet (context.models[0]) in training mode" in message, message
    assert "trace once" in message and cause in message, message


@pytest.mark.slow
def test_trace_once_a_new_shape_is_an_error_unless_dynamic() -> None:
    with pytorch.init(hparams=HP, compile=AOT) as ctx:
        model = ctx.wrap_model(torch.nn.Linear(3, 1))
        model(torch.ones(4, 3))
        with pytest.raises(
            GraphChangedError, match=r"Linear \(context.models\[0\]\).*size mismatch at index 1"
        ):
            model(torch.ones(4, 5))  # same batch size, another feature size
    with pytorch.init(hparams=HP, compile={**AOT, "dynamic": True}) as ctx:
        model = ctx.wrap_model(torch.nn.Sequential(torch.nn.Flatten(0)))
        for n in (4, 6, 3):
            assert model(torch.ones(n, 2)).shape == (2 * n,)
        assert len(compiled_forward(model).backend.compiled) == 1  # one symbolic graph


@pytest.mark.slow
def test_retrace_every_iteration_runs_python_side_effects_every_iteration() -> None:
    # count=1: the forward adds 1 to model.calls. Traced once this is a changed graph (above);
    # retraced, it runs on every forward and the graph (which does not use it) stays the same.
    trial, _ = _train(6, {**AOT, "retrace_every_iteration": True}, count=1, validation=3)
    forwards = 6 + 2 * 3  # 6 training batches, 2 validations of 3 batches
    assert trial.net.calls == forwards
    compiled = compiled_forward(trial.net)
    assert compiled is not None and len(compiled.backend.captured) == forwards  # traced every call
    assert len(compiled.backend.compiled) == 4  # but each distinct graph compiled once
    assert trial.recorder.weights == pytest.approx(expected_weights(0.5, 0.01, _batches(6)), rel=REL)


SEEN: List[int] = []


class GraphBreak(torch.nn.Module):
    """A forward with a graph break (``print``) and a Python side effect on a global list."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        print("forward", x.shape[0])  # a graph break: the rest runs in a resume function
        SEEN.append(1)  # torch guards on the list (its length): a changed graph when traced once
        return x * 2


@pytest.mark.slow
@pytest.mark.parametrize("retrace", [False, True])
def test_graph_breaks_and_side_effects_on_globals(retrace: bool) -> None:
    SEEN.clear()
    with pytorch.init(hparams=HP, compile={**AOT, "retrace_every_iteration": retrace}) as ctx:
        model = ctx.wrap_model(GraphBreak())
        model(torch.ones(4, 3))
        if not retrace:
            with pytest.raises(GraphChangedError, match=r"GraphBreak \(context.models\[0\]\).*SEEN"):
                model(torch.ones(4, 3))
            return
        for _ in range(11):  # past torch's recompile limit (8): still traced, never eager
            model(torch.ones(4, 3))
    assert len(SEEN) == 12
    compiled = compiled_forward(model)
    assert compiled is not None
    assert len(compiled.backend.captured) == 2 * 12  # both graphs traced on every call
    assert len(compiled.backend.compiled) == 2


@pytest.mark.slow
def test_retrace_every_iteration_a_changed_graph_is_still_an_error() -> None:
    with pytest.raises(GraphChangedError) as e:
        _train(6, {**AOT, "retrace_every_iteration": True}, flip_at=3)
    message = str(e.value)
    assert "retrace_every_iteration" in message and "FlagNet (context.models[0])" in message
    assert "the retraced graph has 'x = l_x_ * 2'" in message, message


@pytest.mark.slow
def test_forward_hooks_of_callbacks_stay_outside_the_graph() -> None:
    """``on_before_forward``/``on_after_forward`` are torch forward hooks on the wrapped model;
    the compiled forward runs inside the module call, so they fire eagerly on every call."""

    class Count(pytorch.PyTorchCallback):
        def __init__(self) -> None:
            self.before = self.after = 0

        def on_before_forward(self, model: Any, args: Any, kwargs: Any) -> None:
            self.before += 1

        def on_after_forward(self, model: Any, output: Any) -> None:
            self.after += 1

    count = Count()
    with pytorch.init(hparams=HP, exp_conf={"reproducibility": {"experiment_seed": 1}}, compile=AOT) as ctx:
        trial = CompileTrial(ctx)
        pytorch.Trainer(trial, ctx, callbacks=[count]).fit(
            max_length=pytorch.Batch(5), validation_period=pytorch.Batch(5), progress=False, record=False
        )
    assert (count.before, count.after) == (5 + 3, 5 + 3)  # 5 batches, 3 validation batches
    assert len(compiled_forward(trial.net).backend.captured) == 4  # keys: train 4, 2; eval 2, 1


def test_a_deep_copy_of_a_compiled_model_runs_eagerly_on_its_own_parameters() -> None:
    with pytorch.init(hparams=HP, compile=AOT) as ctx:
        model = ctx.wrap_model(torch.nn.Linear(2, 1))
        model(torch.ones(3, 2))
        twin = copy.deepcopy(model)
        with torch.no_grad():
            twin.bias.fill_(100.0)
        assert compiled_forward(twin) is None and compiled_forward(model) is not None
        assert twin(torch.zeros(1, 2)).item() == 100.0
        assert model(torch.zeros(3, 2)).tolist() == [[model.bias.item()]] * 3


# --- 3. checkpoints: compiled and eager are interchangeable ---------------------------------------


def _model_keys(checkpoint: str) -> List[str]:
    state = torch.load(os.path.join(checkpoint, "state_dict.pth"), weights_only=True)
    return [k for sd in state["context"]["models_state_dict"] for k in sd]


@pytest.mark.slow
@pytest.mark.parametrize(
    "first, then", [(AOT, None), (None, AOT)], ids=["compiled-then-eager", "eager-then-compiled"]
)
def test_checkpoints_resume_across_compiled_and_eager(first: Any, then: Any) -> None:
    _, a = _train(4, first)
    ckpt = _checkpoint(a, 2)
    assert _model_keys(ckpt) == ["weight"]  # no "_orig_mod." either way
    resumed, _ = _train(6, then, latest=ckpt)
    straight, _ = _train(6, None)
    assert resumed.recorder.weights == pytest.approx(straight.recorder.weights[2:], rel=REL)
    assert straight.recorder.weights == pytest.approx(expected_weights(0.5, 0.01, _batches(6)), rel=REL)


def test_hand_compiled_model_saves_plain_keys_and_old_prefixed_checkpoints_load() -> None:
    with pytorch.init(hparams=HP) as ctx:
        model = ctx.wrap_model(torch.compile(torch.nn.Linear(2, 1), backend="eager"))
        state = ctx.harness.state_dict()
        assert list(state["models_state_dict"][0]) == ["weight", "bias"]
        # A checkpoint of a hand-compiled model from before, with torch's prefix, still loads.
        prefixed = {f"_orig_mod.{k}": v + 1 for k, v in state["models_state_dict"][0].items()}
        ctx.harness.load_state_dict({**state, "models_state_dict": [prefixed]})
        assert torch.equal(model.bias.detach(), prefixed["_orig_mod.bias"])


# --- 4. aggregation, AMP, inductor ----------------------------------------------------------------


@pytest.mark.slow
def test_gradient_aggregation_compiled_matches_closed_form() -> None:
    trial, _ = _train(6, AOT, k=2)
    assert trial.recorder.weights == pytest.approx(
        expected_weights(0.5, 0.01, _batches(6), aggregation=2), rel=REL
    )


@pytest.mark.slow
def test_amp_compiled_matches_eager_amp() -> None:
    compiled, _ = _train(4, AOT, amp=True)
    eager, _ = _train(4, None, amp=True)
    assert compiled.recorder.weights == pytest.approx(eager.recorder.weights, rel=1e-2)
    exact = expected_weights(0.5, 0.01, _batches(4))
    assert compiled.recorder.weights == pytest.approx(exact, rel=1e-2)
    assert compiled.recorder.weights != pytest.approx(exact, rel=1e-7)  # bfloat16 did round


@pytest.mark.slow
def test_inductor_weights_equal_eager_within_tolerance() -> None:
    compiled, _ = _train(6, True, validation=3)  # inductor: a C++ build per graph (slow)
    eager, _ = _train(6, None, validation=3)
    assert compiled.recorder.weights == pytest.approx(eager.recorder.weights, rel=REL)
    assert compiled.recorder.weights == pytest.approx(expected_weights(0.5, 0.01, _batches(6)), rel=REL)


# --- 5. a missing compiler is one error before training ------------------------------------------


@pytest.mark.slow
def test_missing_cxx_compiler_is_one_error_at_wrap_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/bin/g++",))
    with pytest.raises(CompilerMissingError) as e:
        _train(2, True)
    message = str(e.value)
    assert "\n" not in message
    assert "backend 'inductor' on the CPU needs a C++ compiler" in message
    assert "backend: aot_eager" in message
    _train(2, AOT)  # other backends need none


@pytest.mark.slow
def test_missing_cxx_from_the_environment(tmp_path: Any) -> None:
    """``$CXX`` names the compiler (read by torch when it starts): a missing one fails the probe."""
    import subprocess
    import sys

    code = (
        "import torch; from determined_lite.config import CompileSettings;"
        "from determined_lite.pytorch._compile import check_compiler;"
        "check_compiler(CompileSettings(enabled=True), torch.device('cpu'))"
    )
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++")}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=budget(120)
    )
    assert proc.returncode != 0 and "CompilerMissingError" in proc.stderr
    assert "needs a C++ compiler" in proc.stderr
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=budget(120))
    assert ok.returncode == 0, ok.stderr
