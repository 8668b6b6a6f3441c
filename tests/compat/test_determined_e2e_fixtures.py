"""Determined's own e2e fixtures and Core API tutorial (stages 0-4), as shipped
(tests/fixtures/determined_e2e/), through ``det-lite experiment create`` (issue 30, "Done
when"), and a context's ``startup-hook.sh``.

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
