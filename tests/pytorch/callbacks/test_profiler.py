"""Profiler: torch.profiler over the chosen batches, one trace per worker in the trial's
TensorBoard directory; also from the config's ``profiling`` section and ``context.set_profiler``."""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional, Set

import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch.callbacks import Profiler
from tests.fixtures.cb_trial import CbTrial, fit_cb_trial


def traces(tb_path: Optional[str]) -> List[str]:
    return sorted(glob.glob(os.path.join(str(tb_path), "rank*.pt.trace.json")))


def profiled_steps(path: str) -> Set[str]:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}


def op_names(path: str) -> Set[str]:
    with open(path) as f:
        return {str(e.get("name")) for e in json.load(f)["traceEvents"]}


def test_the_chosen_batches_are_traced_into_tensorboard() -> None:
    trial, _ = fit_cb_trial(max_batches=6, validation=None, trainer_callbacks=[Profiler(2, 3)])
    (trace,) = traces(trial.context.get_tensorboard_path())
    assert os.path.basename(trace).startswith("rank0.")
    assert profiled_steps(trace) == {"ProfilerStep#2", "ProfilerStep#3"}
    assert "aten::mse_loss" in op_names(trace)  # the training step's ops are in it


def test_the_config_section_enables_it() -> None:
    trial, _ = fit_cb_trial(
        max_batches=4,
        validation=None,
        exp_conf={"profiling": {"enabled": True, "begin_on_batch": 1, "end_after_batch": 1}},
    )
    (trace,) = traces(trial.context.get_tensorboard_path())
    assert profiled_steps(trace) == {"ProfilerStep#1"}


def test_fit_profiling_enabled_enables_it() -> None:
    # Determined's e2e fixture mnist_pytorch/profiling.py: trainer.fit(..., profiling_enabled=True).
    conf = {"profiling": {"begin_on_batch": 1, "end_after_batch": 2}}
    with pytorch.init(hparams={"global_batch_size": 4}, exp_conf=conf) as ctx:
        trial = CbTrial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(4), profiling_enabled=True)
    (trace,) = traces(trial.context.get_tensorboard_path())
    assert profiled_steps(trace) == {"ProfilerStep#1", "ProfilerStep#2"}


def test_profiling_disabled_writes_nothing() -> None:
    trial, _ = fit_cb_trial(max_batches=2, validation=None, exp_conf={"profiling": {"enabled": False}})
    assert traces(trial.context.get_tensorboard_path()) == []


class SetProfilerTrial(CbTrial):
    """Determined's example: skip 1 batch, warm up on 1, profile 2 (once)."""

    def __init__(self, context: pytorch.PyTorchTrialContext, callbacks: Any = None) -> None:
        super().__init__(context, callbacks)
        context.set_profiler(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        )


def test_context_set_profiler_runs_it_with_torchs_schedule() -> None:
    with pytorch.init(
        hparams={"global_batch_size": 4}, exp_conf={"profiling": {"enabled": True, "begin_on_batch": 0}}
    ) as ctx:
        trial = SetProfilerTrial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(6))
    (trace,) = traces(ctx.get_tensorboard_path())  # set_profiler wins over the config section
    assert profiled_steps(trace) == {"ProfilerStep#2", "ProfilerStep#3"}


def test_set_profiler_refuses_positional_arguments() -> None:
    with pytorch.init(hparams={"global_batch_size": 4}) as ctx:
        with pytest.raises(TypeError, match="keyword arguments of torch.profiler.profile"):
            ctx.set_profiler([torch.profiler.ProfilerActivity.CPU])


def test_a_resumed_run_profiles_the_rest_of_the_range() -> None:
    _, first = fit_cb_trial(max_batches=3, validation=None)
    latest = first.checkpoints[-1]["path"]
    trial, _ = fit_cb_trial(max_batches=8, validation=None, latest=latest, trainer_callbacks=[Profiler(2, 4)])
    (trace,) = traces(trial.context.get_tensorboard_path())
    # Batches 3 and 4: steps 0 and 1 of this run.
    assert profiled_steps(trace) == {"ProfilerStep#0", "ProfilerStep#1"}
    # A range trained before this run profiles nothing.
    trial, _ = fit_cb_trial(max_batches=8, validation=None, latest=latest, trainer_callbacks=[Profiler(0, 1)])
    assert traces(trial.context.get_tensorboard_path()) == []
    # So does one beyond max_length.
    trial, _ = fit_cb_trial(max_batches=2, validation=None, trainer_callbacks=[Profiler(5, 6)])
    assert traces(trial.context.get_tensorboard_path()) == []


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((-1,), {}, "begin_on_batch"),
        ((3, 2), {}, "before begin_on_batch"),
        ((), {"on_trace_ready": print}, "dirname"),
    ],
)
def test_bad_arguments(args: Any, kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Profiler(*args, **kwargs)


def test_without_a_tensorboard_directory_it_needs_dirname(tmp_path: Any) -> None:
    with pytorch.init(hparams={"global_batch_size": 4}, enable_tensorboard_logging=False) as ctx:
        with pytest.raises(pytorch.CallbackError, match=r"Profiler\(dirname=\.\.\.\)"):
            pytorch.Trainer(CbTrial(ctx), ctx, callbacks=[Profiler()]).fit(max_length=pytorch.Batch(1))
        pytorch.Trainer(CbTrial(ctx), ctx, callbacks=[Profiler(dirname=str(tmp_path))]).fit(
            max_length=pytorch.Batch(2)
        )
    (trace,) = traces(str(tmp_path))
    assert profiled_steps(trace) == {"ProfilerStep#0", "ProfilerStep#1"}  # no end: to the last batch
