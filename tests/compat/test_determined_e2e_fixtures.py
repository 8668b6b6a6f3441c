"""Determined's own e2e fixtures and Core API tutorial (stages 0-4), as shipped
(tests/fixtures/determined_e2e/), through ``det-lite experiment create`` (issue 30, "Done
when"), and a context's ``startup-hook.sh``; ``determined.experimental.core_v2`` scripts
managed (through det-lite) and unmanaged (plain ``python3``, ``torchrun``).

Before: ``from determined.common import util`` and ``core_context.alert()`` failed, and a
``startup-hook.sh`` was silently not run."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tests.cli_helpers import cli, describe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORE_API = os.path.join(REPO, "tests", "fixtures", "determined_e2e", "core_api")

pytestmark = pytest.mark.timeout(300)


def create(config: str, context: str) -> Any:
    proc = cli("experiment", "create", config, context)
    return proc, describe(1)


def trial_logs(trial_id: int = 1) -> str:
    return cli("trial", "logs", str(trial_id)).stdout


def test_generic_metrics_fixture(_det_lite_home: Any) -> None:
    # 11_generic_metrics.py: determined.common.util's group names, report_metrics of six
    # groups (training and validation stored, the others logged), core_context.alert().
    proc, exp = create(os.path.join(CORE_API, "11_generic_metrics.yaml"), CORE_API)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED"
    # group index = batch % 6: training at steps 1, 7, ..., 97; validation at 2, 8, ..., 98.
    assert [m["total_batches"] for m in trial["training_metrics"]] == list(range(1, 101, 6))
    assert [m["total_batches"] for m in trial["validation_metrics"]] == list(range(2, 101, 6))
    first = trial["training_metrics"][0]["metrics"]
    assert set(first) == {"m0", "m1", "m2", "ztraining/me.t r%i]\\c_0", "ztraining/me.t r%i]\\c_1",
                          "ztraining/me.t r%i]\\c_2"}
    assert "alert (debug): end of main" in trial_logs()


def test_arbitrary_workload_order_fixture(_det_lite_home: Any) -> None:
    proc, exp = create(os.path.join(CORE_API, "arbitrary_workload_order.yaml"), CORE_API)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED"
    # 16 action sets (every permutation of every subset of 3 actions), one step each; 11 hold
    # "val" (training metrics), 11 "train" (validation metrics), 11 "ckpt".
    assert len(trial["training_metrics"]) == 11 and len(trial["validation_metrics"]) == 11


def test_whoami_fixture(_det_lite_home: Any) -> None:
    proc, exp = create(os.path.join(CORE_API, "whoami.yaml"), CORE_API)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exp["trials"][0]["state"] == "COMPLETED"
    assert f"id output: uid={os.getuid()}" in trial_logs()


def _hook_context(tmp_path: Any, hook: str) -> str:
    context = os.path.join(str(tmp_path), "ctx")
    os.makedirs(context)
    shutil.copy(os.path.join(CORE_API, "whoami.yaml"), os.path.join(context, "exp.yaml"))
    with open(os.path.join(context, "whoami.py"), "w") as f:
        f.write("import os\nprint('trial sees HOOK_VALUE=' + os.environ.get('HOOK_VALUE', 'unset'))\n")
    with open(os.path.join(context, "startup-hook.sh"), "w") as f:
        f.write(hook)
    return context


def test_startup_hook_runs_before_the_trial(tmp_path: Any, _det_lite_home: Any) -> None:
    # Determined sources startup-hook.sh (set -e) before the trial: its exports reach the trial,
    # its output is in the trial's log, before the trial's.
    context = _hook_context(tmp_path, "echo hook says hello\nexport HOOK_VALUE=42\n")
    proc, exp = create(os.path.join(context, "exp.yaml"), context)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exp["trials"][0]["state"] == "COMPLETED"
    logs = trial_logs()
    assert "hook says hello" in logs and "trial sees HOOK_VALUE=42" in logs
    assert logs.index("hook says hello") < logs.index("trial sees HOOK_VALUE=42")


def test_a_failing_startup_hook_fails_the_trial_with_one_line(tmp_path: Any, _det_lite_home: Any) -> None:
    context = _hook_context(tmp_path, "export HOOK_VALUE=1\nfalse\necho not reached\n")
    proc, exp = create(os.path.join(context, "exp.yaml"), context)
    assert proc.returncode != 0
    assert exp["trials"][0]["state"] == "ERROR"
    logs = trial_logs()
    assert "det-lite: startup-hook.sh failed (exit status 1); the trial was not started" in logs
    assert "not reached" not in logs and "trial sees" not in logs
    assert "Traceback" not in logs + proc.stdout + proc.stderr


# --- Determined's Core API tutorial (examples/tutorials/core_api), as shipped -----------------

TUTORIAL = os.path.join(REPO, "tests", "fixtures", "determined_e2e", "tutorial_core_api")


def _stage(name: str, exp_id: int) -> Any:
    proc = cli("experiment", "create", os.path.join(TUTORIAL, f"{name}.yaml"), TUTORIAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return describe(exp_id)


@pytest.mark.timeout(600)
def test_core_api_tutorial_stages_0_to_2(_det_lite_home: Any) -> None:
    exp = _stage("0_start", 1)  # a plain script: x printed 100 times, nothing reported
    assert exp["trials"][0]["state"] == "COMPLETED"
    assert "x is now 100" in trial_logs(exp["trials"][0]["id"])

    exp = _stage("1_metrics", 2)  # training x every 10 batches, validation x at the end
    (trial,) = exp["trials"]
    assert [(m["total_batches"], m["metrics"]["x"]) for m in trial["training_metrics"]] == [
        (b, b) for b in range(10, 101, 10)
    ]
    assert [(m["total_batches"], m["metrics"]) for m in trial["validation_metrics"]] == [(100, {"x": 100})]

    exp = _stage("2_checkpoints", 3)  # plus a checkpoint every 10 batches (its state file)
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["checkpoints"]
    latest = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    with open(os.path.join(latest["path"], "state")) as f:
        assert f.read() == f"100,100,{trial['id']}"


@pytest.mark.timeout(900)
def test_core_api_tutorial_stage_3_asha_search(_det_lite_home: Any) -> None:
    exp = _stage("3_hpsearch", 1)
    trials = exp["trials"]
    assert len(trials) == 10 and all(t["state"] == "COMPLETED" for t in trials)
    for t in trials:  # x = increment_by per batch, resumed exactly across ASHA's rungs
        inc = t["hparams"]["increment_by"]
        for m in t["validation_metrics"]:
            assert m["metrics"] == {"x": inc * m["total_batches"], "batches": m["total_batches"]}



@pytest.mark.timeout(600)
def test_core_api_tutorial_stage_4_on_two_slots(_det_lite_home: Any) -> None:
    # 4_distributed.py launches its own worker per slot (wrap_rank), each building
    # det.core.DistributedContext(rank=..., chief_ip=...) and calling det.core.init() in a process
    # det-lite did not start; every batch adds allgather(increment_by) summed over both workers.
    exp = _stage("4_distributed", 1)
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED"
    step = 2 * trial["hparams"]["increment_by"]  # both workers' increment_by
    assert [(m["total_batches"], m["metrics"]) for m in trial["validation_metrics"]] == [
        (b, {"x": step * b}) for b in range(10, 101, 10)
    ]
    latest = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    with open(os.path.join(latest["path"], "state")) as f:
        assert f.read() == f"{step * 100},100,{trial['id']}"
    logs = trial_logs(trial["id"])
    assert "[rank 0] INFO" in logs and "[rank 1] INFO" in logs and "worker starting" in logs
    assert f"x is now {step * 100}" in logs

ONCE = """import determined as det

info = det.get_cluster_info()
with det.core.init() as core_context:
    print(f"script ran: slots {len(info.slot_ids)}, workers {core_context.distributed.size}")
    core_context.train.report_validation_metrics(steps_completed=1, metrics={"x": 1})
"""


@pytest.mark.parametrize("launcher", [False, True])
def test_a_script_without_a_launcher_runs_once_on_two_slots(
    tmp_path: Any, _det_lite_home: Any, launcher: bool
) -> None:
    # Determined runs `entrypoint: python3 script.py` once per container, whatever the slots; a
    # launcher (determined.launch.torch_distributed) starts one worker per slot.
    context = os.path.join(str(tmp_path), "ctx")
    os.makedirs(context)
    with open(os.path.join(context, "once.py"), "w") as f:
        f.write(ONCE)
    prefix = "python3 -m determined.launch.torch_distributed " if launcher else ""
    config = os.path.join(context, "exp.yaml")
    with open(config, "w") as f:
        f.write(
            f"entrypoint: {prefix}python3 once.py\nresources:\n  slots_per_trial: 2\n"
            "searcher:\n  name: single\n  metric: x\nmax_restarts: 0\n"
        )
    proc, exp = create(config, context)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exp["trials"][0]["state"] == "COMPLETED"
    lines = [x for x in trial_logs().splitlines() if "script ran" in x]
    if launcher:
        assert sorted(lines) == [f"[rank {r}] script ran: slots 2, workers 2" for r in (0, 1)]
    else:
        assert lines == ["script ran: slots 2, workers 1"]


# --- determined.experimental.core_v2: managed (through det-lite) and unmanaged (plain python3) --

UNMANAGED = os.path.join(REPO, "tests", "fixtures", "determined_e2e", "unmanaged")


def _python(script: str, cwd: str, *args: str, **env: str) -> Any:
    """``python3 [ARGS] SCRIPT`` as a user runs it (DET_LITE_HOME: the test's), ``import
    determined`` giving this checkout's alias."""
    import subprocess
    import sys

    from tests.timing import budget

    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, *args, script],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=budget(240),
    )


def _profiler_trace(home: Any, exp: Any) -> None:
    """The torch profiler's trace, written by the fixture under the trial's TensorBoard directory."""
    import glob
    import json

    (trial,) = exp["trials"]
    directory = os.path.join(str(home), "tensorboard", f"experiment_{exp['id']}", f"trial_{trial['id']}")
    (trace,) = glob.glob(os.path.join(directory, "*.pt.trace.json"))
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("name") == "aten::matmul" for e in events)


def test_pytorch_profiler_sync_fixture(_det_lite_home: Any) -> None:
    # core_v2.init() in a det-lite trial (managed): the Core API context det.core.init() builds;
    # core_v2.train.get_tensorboard_path() is the trial's, where the profiler's trace goes.
    proc, exp = create(os.path.join(CORE_API, "pytorch_profiler_sync.yaml"), CORE_API)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (exp["kind"], exp["trials"][0]["state"]) == ("experiment", "COMPLETED")
    _profiler_trace(_det_lite_home, exp)


def test_pytorch_profiler_sync_fixture_unmanaged(_det_lite_home: Any) -> None:
    # The same script as a plain python3 process: Determined's unmanaged experiment, in the store.
    proc = _python("pytorch_profiler_sync.py", CORE_API)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert (exp["name"], exp["kind"], exp["state"], exp["pid"]) == (
        "pytorch-profiler-sync-test", "unmanaged", "COMPLETED", None
    )
    assert [t["state"] for t in exp["trials"]] == ["COMPLETED"]
    _profiler_trace(_det_lite_home, exp)
    listed = cli("experiment", "list").stdout
    assert "pytorch-profiler-sync-test (unmanaged) | COMPLETED" in listed


def test_unmanaged_singleton_example(_det_lite_home: Any) -> None:
    # examples/features/unmanaged/1_singleton.py: training loss every step, validation every 10.
    proc = _python("1_singleton.py", UNMANAGED)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    assert [m["total_batches"] for m in trial["training_metrics"]] == list(range(100))
    assert [m["total_batches"] for m in trial["validation_metrics"]] == list(range(9, 100, 10))
    assert all(0 <= m["metrics"]["loss"] < 1 for m in trial["training_metrics"])


def test_unmanaged_error_termination_fixture(_det_lite_home: Any) -> None:
    # e2e unmanaged/error_termination.py: ValueError at step 15 -> the experiment is ERROR.
    proc = _python("error_termination.py", UNMANAGED, DET_TEST_EXTERNAL_EXP_ID="ext-err")
    assert proc.returncode == 1 and "ValueError: oops" in proc.stderr
    exp = describe(1)
    assert (exp["state"], exp["config"]["external_experiment_id"]) == ("ERROR", "ext-err")
    (trial,) = exp["trials"]
    assert trial["state"] == "ERROR"
    assert [m["total_batches"] for m in trial["training_metrics"]] == list(range(16))
    assert [m["total_batches"] for m in trial["validation_metrics"]] == [9]


def test_unmanaged_torch_distributed_example(_det_lite_home: Any) -> None:
    # examples/features/unmanaged/3_torch_distributed.py under torchrun (2 workers): the chief
    # records the experiment; each step's checkpoint is sharded (every rank writes its file).
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    torchrun = ["-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", port, "--max_restarts", "0"]
    proc = _python("3_torch_distributed.py", UNMANAGED, *torchrun)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "See the experiment at: #/experiments/1" in proc.stdout
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    # Rank 0 reports even steps (stored); rank 1's odd steps and validations are only logged.
    assert [m["metrics"]["rank"] for m in trial["training_metrics"]] == [0.01] * 50
    assert [m["total_batches"] for m in trial["training_metrics"]] == list(range(0, 100, 2))
    (latest,) = trial["checkpoints"]  # the policy keeps the latest (no searcher metric)
    assert latest["total_batches"] == 99
    for rank in (0, 1):
        with open(os.path.join(latest["path"], f"state_{rank}")) as f:
            assert f.read() == f"99,{rank}"


# Determined's documented form of an unmanaged script (docs: "Unmanaged experiments").
DOCS_FORM = """import pathlib
import tempfile

from determined.experimental import core_v2

core_v2.init(
    config=core_v2.Config(
        name="unmanaged-docs",
        hparams={"lr": 0.1},
        searcher={"name": "single", "metric": "loss", "smaller_is_better": True},
    ),
)
for step in range(1, 31):
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
    if step % 10 == 0:
        core_v2.train.report_validation_metrics(steps_completed=step, metrics={"loss": abs(step - 20) / 10})
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, "weights").write_text(str(step))
            core_v2.checkpoint.upload(d, {"steps_completed": step})
print("See the experiment at:", core_v2.url_reverse_webui_exp_view())
core_v2.close()
"""


def test_an_unmanaged_script_in_the_documented_form(tmp_path: Any, _det_lite_home: Any) -> None:
    with open(os.path.join(str(tmp_path), "train.py"), "w") as f:
        f.write(DOCS_FORM)
    proc = _python("train.py", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "See the experiment at: #/experiments/1" in proc.stdout
    exp = describe(1)
    assert (exp["state"], exp["config"]["entrypoint"]) == ("COMPLETED", "python3 train.py")
    (trial,) = exp["trials"]
    assert (trial["hparams"], trial["best_validation"]) == ({"lr": 0.1}, 0.0)
    assert [(m["total_batches"], m["metrics"]["loss"]) for m in trial["training_metrics"]] == [
        (s, 1.0 / s) for s in range(1, 31)
    ]
    assert [(m["total_batches"], m["metrics"]) for m in trial["validation_metrics"]] == [
        (10, {"loss": 1.0}), (20, {"loss": 0.0}), (30, {"loss": 1.0})
    ]
    # Determined's default retention: the trial's best (20) and latest (30) checkpoints.
    assert sorted(c["total_batches"] for c in trial["checkpoints"]) == [20, 30]

    from determined_lite import client

    with pytest.warns(FutureWarning, match="top_checkpoint"):  # deprecated, as in Determined
        best = client.get_experiment(1).top_checkpoint()
    assert best.metadata["steps_completed"] == 20
    target = os.path.join(str(tmp_path), "best")
    best.download(target)
    with open(os.path.join(target, "weights")) as f:
        assert f.read() == "20"


def test_sleep_fixture_is_killed_promptly(_det_lite_home: Any) -> None:
    # e2e test_kill_experiment_ignoring_preemption: sleep.py never asks should_preempt().
    import subprocess
    import sys
    import time

    from tests.timing import budget

    argv = [sys.executable, "-m", "determined_lite.cli", "experiment", "create"]
    proc = subprocess.Popen(
        [*argv, os.path.join(CORE_API, "sleep.yaml"), CORE_API],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the trial's process runs
            if "trial 1 starts" in line:
                break
        started = time.monotonic()
        cli("experiment", "kill", "1", check=True)
        out, _ = proc.communicate(timeout=budget(60))
        took = time.monotonic() - started
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    assert took < budget(20), f"kill took {took:.1f}s"
    exp = describe(1)
    assert (exp["state"], exp["trials"][0]["state"]) == ("CANCELED", "CANCELED")
