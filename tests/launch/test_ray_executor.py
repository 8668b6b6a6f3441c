"""``resources.executor: ray`` on a real 2-node Ray cluster started in this process (head + 1
node, 1 CPU each): trials run through ``det-lite experiment create`` as a user runs them, and
every number the store holds is compared with the linear fixture's closed form."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from determined_lite.launch._ray_slot import STORAGE_VIEW_ENV
from tests.cli_helpers import activate, asha_overrides, cli, describe, pause_foreground, wait_for_batches
from tests.cli_helpers import write_config as _write_config
from tests.compat.test_determined_trial import weights as core_weights
from tests.core.test_core_api_scripts import assert_closed_form as assert_core_closed_form
from tests.core.test_core_api_scripts import printed_best
from tests.core.test_core_api_scripts import val_loss as core_val_loss
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

# xdist_group: the Ray modules run on one worker, one cluster at a time (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("ray")]


@pytest.fixture
def on_ray(shared_ray_cluster, monkeypatch):
    """The session's 2-node cluster (tests/conftest.py), the address in ``$RAY_ADDRESS``."""
    monkeypatch.setenv("RAY_ADDRESS", shared_ray_cluster.address)
    return shared_ray_cluster


def write_config(tmp_path, **changes) -> str:
    changes.setdefault("resources.executor", "ray")
    return _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, "exp.yaml", **changes)


def assert_closed_form(trial: dict, lr: float = 0.01, batches=(4, 8, 12)) -> None:
    assert [v["total_batches"] for v in trial["validation_metrics"]] == list(batches)
    for v in trial["validation_metrics"]:
        w = closed_form(lr, v["total_batches"], batch_size=2, n=8)[-1]
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


def assert_no_traceback(output: str) -> None:
    """What a user sees of a run on Ray has no Python traceback (Ray's actor handles once
    printed one from SlotWorker.__del__ at every exit)."""
    assert "Traceback" not in output and "Exception ignored" not in output, output


def placed_nodes(output: str) -> list:
    """The Ray nodes each run's ranks were placed on, from the runner's placement lines."""
    lines = [line for line in output.splitlines() if "placed on the Ray cluster" in line]
    return [re.findall(r"rank \d+ on \S+ \(node (\w+)\)", line) for line in lines]


def test_two_slot_torch_trial_spans_both_nodes(tmp_path, on_ray):
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "torch"}
    path = write_config(tmp_path, **two_slots)
    proc = cli("experiment", "create", path, LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_no_traceback(proc.stdout + proc.stderr)
    (nodes,) = placed_nodes(proc.stdout + proc.stderr)
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes  # 1 CPU per node: only both fit it
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)  # 2 slots of batch 1 == 1 slot of batch 2 == the closed form
    (run,) = trial["runs"]  # where it ran, as describe shows it
    assert run["executor"] == "ray" and run["slots"] == 2
    assert run["host"].startswith("ray nodes ") and all(n in run["host"] for n in nodes), run
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 12 and os.path.isdir(ckpt["path"])


def test_grid_of_two_trials(tmp_path, on_ray):
    path = write_config(
        tmp_path,
        **{
            "searcher": {
                "name": "grid",
                "metric": "val_loss",
                "max_length": {"batches": 12},
                "max_concurrent_trials": 2,
            },
            "hyperparameters.lr": {"type": "categorical", "vals": [0.01, 0.02]},
        },
    )
    proc = cli("experiment", "create", path, LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = describe(1)["trials"]
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.01, 0.02]
    for t in trials:
        assert t["state"] == "COMPLETED"
        assert_closed_form(t, t["hparams"]["lr"])


# --- only the driver writes the store ---------------------------------------------------------

# A trial worker: started as ``-m determined_lite.launch.worker``, or forked from the local fork
# server (whose command line it keeps) with the trial's environment, $DET_LITE_TRIAL_SPEC set.
AUDIT_SQLITE = """
import os
import sys

def _no_sqlite_in_workers(event, args):
    if event == "sqlite3.connect":
        with open("/proc/self/cmdline", "rb") as f:
            worker = b"determined_lite.launch.worker" in f.read()
        if worker or os.environ.get("DET_LITE_TRIAL_SPEC"):
            raise RuntimeError(f"a trial worker opened SQLite: {args[0]}")

sys.addaudithook(_no_sqlite_in_workers)
"""


def _audited_env(tmp_path) -> dict:
    """The environment with a ``sitecustomize`` that fails any worker process opening SQLite."""
    site = tmp_path / "audit"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AUDIT_SQLITE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("executor", ["ray", "local"])
def test_only_the_driver_opens_the_store(tmp_path, on_ray, executor):
    """Workers under the Ray executor never open SQLite: their chief reports through its actor
    to the driver. The local executor's chief writes the store itself, so the same audit fails
    its trial (the audit is real)."""
    path = write_config(tmp_path, **{"resources.executor": executor, "max_restarts": 0})
    proc = cli("experiment", "create", path, LINEAR, env=_audited_env(tmp_path), timeout=400)
    (trial,) = describe(1)["trials"]
    if executor == "local":
        assert proc.returncode != 0 and trial["state"] == "ERROR"
        assert "a trial worker opened SQLite" in proc.stdout + proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert trial["state"] == "COMPLETED"
    assert_closed_form(trial)
    assert [t["total_batches"] for t in trial["training_metrics"]] == [2, 4, 6, 8, 10, 12]
    (ckpt,) = trial["checkpoints"]  # registered once complete, by the driver
    assert ckpt["total_batches"] == 12 and os.path.isfile(os.path.join(ckpt["path"], "metadata.json"))
    assert trial["best_validation"] == pytest.approx(val_loss(closed_form(0.01, 12, 2, 8)[-1], 4), rel=1e-9)


def test_a_core_api_script_reports_through_the_driver(tmp_path, on_ray):
    """Determined's Core API script (``det.core.init()``, its own loop): on Ray its reports and
    checkpoints reach the store through the driver too, and its store read
    (``get_experiment_best_validation()``) is answered by the driver after the chief's own
    validation report (the SQLite audit is on: no worker opens the store, even read-only)."""
    scripts = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
    changes = {"resources.executor": "ray", "hyperparameters.print_best": True}
    path = _write_config(os.path.join(scripts, "core.yaml"), tmp_path, "exp.yaml", **changes)
    proc = cli("experiment", "create", path, scripts, env=_audited_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "opened SQLite" not in proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 8
    assert_core_closed_form(trial)  # the local executor's test's own check
    assert printed_best(proc.stdout) == [("before", None), ("after", trial["best_validation"])]
    assert trial["best_validation"] == pytest.approx(core_val_loss(core_weights(8, gamma=1.0)[-1]), rel=1e-12)
    (ckpt,) = trial["checkpoints"]
    assert ckpt["total_batches"] == 8


# --- pause, activate, kill --------------------------------------------------------------------


def _start(path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def _slow_two_slot_config(tmp_path, **changes) -> str:
    return write_config(
        tmp_path,
        **{
            "resources.slots_per_trial": 2,
            "resources.distributed_backend": "torch",
            "hyperparameters.sleep_s": 0.2,
            "searcher.max_length": {"batches": 24},
            "min_checkpoint_period": {"batches": 4},
            **changes,
        },
    )


def _assert_uninterrupted(trial: dict) -> None:
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 24
    assert_closed_form(trial, batches=(4, 8, 12, 16, 20, 24))
    assert [t["total_batches"] for t in trial["training_metrics"]] == list(range(2, 25, 2))
    ws = closed_form(0.01, 24, 2, 8)
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)


def _workers_left(home: str) -> list:
    import psutil

    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if "determined_lite.launch.worker" in cmdline and home in cmdline:
            left.append(cmdline)
    return left


@pytest.mark.parametrize("how", ["pause", "ctrl-c"])
def test_pause_then_activate_equals_uninterrupted(tmp_path, on_ray, _det_lite_home, how):
    proc = _start(_slow_two_slot_config(tmp_path))
    wait_for_batches(1, 6, proc, timeout=200)
    if how == "pause":
        pause_foreground(1, proc)
    else:  # the first Ctrl-C pauses at the next checkpoint, as locally
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=budget(90))
        assert proc.returncode == 1, out
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "PAUSED" and 6 <= trial["total_batches"] < 24
    assert _workers_left(str(_det_lite_home)) == []
    activate(1)
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    _assert_uninterrupted(exp["trials"][0])


def test_kill_cancels_and_leaves_no_worker(tmp_path, on_ray, _det_lite_home):
    proc = _start(_slow_two_slot_config(tmp_path))
    wait_for_batches(1, 2, proc, timeout=200)
    cli("experiment", "kill", "1", check=True)
    out, _ = proc.communicate(timeout=budget(90))
    assert proc.returncode == 1, out
    exp = describe(1)
    assert exp["state"] == "CANCELED" and exp["trials"][0]["state"] == "CANCELED"
    assert _workers_left(str(_det_lite_home)) == []


def test_one_rank_failing_stops_the_gang_without_a_restart(tmp_path, on_ray, _det_lite_home):
    """Rank 1 (on the other node) meets a typo before any progress: the gang is stopped, the
    rank's own record stops the restarts, as with the local executor, and nothing is left."""
    changes = {
        "hyperparameters.hparam_typo": "lrr",
        "hyperparameters.typo_rank": 1,
        "resources.slots_per_trial": 2,
        "resources.distributed_backend": "torch",
    }
    proc = cli("experiment", "create", write_config(tmp_path, **changes), LINEAR, timeout=300)
    assert proc.returncode != 0
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0
    logs = cli("trial", "logs", str(trial["id"]), check=True).stdout
    assert "failed: rank 1: UndefinedHParamError (above); not restarted" in logs
    assert logs.count("hyperparameter 'lrr' is not defined") == 1, logs
    assert _workers_left(str(_det_lite_home)) == []


# --- engines ----------------------------------------------------------------------------------


def test_two_slot_horovod_trial_spans_both_nodes(tmp_path, on_ray):
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "horovod"}
    proc = cli("experiment", "create", write_config(tmp_path, **two_slots), LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (nodes,) = placed_nodes(proc.stdout + proc.stderr)
    assert len(set(nodes)) == 2, nodes
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED"
    assert_closed_form(trial)


def test_the_ranks_use_their_nodes_interface_not_the_drivers(tmp_path, on_ray, monkeypatch):
    """The driver names an interface no node has (its nodes started without it): each rank's
    Gloo uses its own node's (the one holding the node's address), and the trial trains as
    anywhere else. Forwarded from the driver, Gloo fails to find the interface."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "det-lite-none0")
    two_slots = {"resources.slots_per_trial": 2, "resources.distributed_backend": "torch", "max_restarts": 0}
    proc = cli("experiment", "create", write_config(tmp_path, **two_slots), LINEAR, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert_closed_form(trial)


def test_asha_promotions_resume_exactly(tmp_path, on_ray):
    overrides = asha_overrides(
        **{"hyperparameters.lr": {"type": "categorical", "vals": [0.001, 0.003, 0.01, 0.02]}}
    )
    proc = cli("experiment", "create", write_config(tmp_path, **overrides), LINEAR, timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = describe(1)["trials"]
    assert len(trials) == 4
    lengths = sorted(t["total_batches"] for t in trials)
    assert lengths[-1] == 8 and set(lengths) <= {2, 4, 8}
    for t in trials:
        reached = [v["total_batches"] for v in t["validation_metrics"]]
        assert reached == sorted(set(reached)) and reached[-1] == t["total_batches"]
        assert_closed_form(t, t["hparams"]["lr"], batches=reached)  # promoted runs resumed exactly
    assert min(trials, key=lambda t: t["best_validation"])["total_batches"] == 8


def test_asha_promotions_in_the_process_through_the_shared_run_directory(tmp_path, on_ray):
    """The question and answer of a promotion decided as the trial reports are files beside
    result.json, on the storage every node shares: the run trains on in its process."""
    overrides = asha_overrides(
        **{"hyperparameters.lr": {"type": "categorical", "vals": [0.001, 0.003, 0.01, 0.02]}}
    )
    overrides["searcher"] = {**overrides["searcher"], "max_concurrent_trials": 1}  # one order
    proc = cli("experiment", "create", write_config(tmp_path, **overrides), LINEAR, timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pattern = r"trial (\d+) promoted at (\d+): train to (\d+) batches in its process"
    promoted = re.findall(pattern, proc.stdout)
    assert promoted, proc.stdout
    trials = {t["id"]: t for t in describe(1)["trials"]}
    for trial_id, at, to in promoted:
        trial = trials[int(trial_id)]
        reached = [v["total_batches"] for v in trial["validation_metrics"]]
        assert int(at) in reached and int(to) in reached
        assert_closed_form(trial, trial["hparams"]["lr"], batches=reached)


# --- nodes come and go (these change the shared cluster: they run last) -----------------------


def test_losing_a_node_restarts_from_the_latest_checkpoint(tmp_path, on_ray, _det_lite_home):
    proc = _start(_slow_two_slot_config(tmp_path))
    wait_for_batches(1, 8, proc, timeout=200)  # a checkpoint at batch 4 or 8 is registered
    on_ray.remove_node(on_ray.worker_node)
    time.sleep(3)  # the gang ends; the trial waits for 2 slots again
    assert proc.poll() is None
    on_ray.worker_node = on_ray.add_node()
    out, _ = proc.communicate(timeout=budget(300))
    assert proc.returncode == 0, out
    assert "was lost" in out
    assert_no_traceback(out)
    (trial,) = describe(1)["trials"]
    assert trial["restarts"] == 1
    _assert_uninterrupted(trial)
    assert _workers_left(str(_det_lite_home)) == []


def test_a_node_that_does_not_see_the_storage_is_refused_at_create(tmp_path, on_ray):
    blind = on_ray.add_node(env={STORAGE_VIEW_ENV: str(tmp_path / "elsewhere")})
    try:
        proc = cli("experiment", "create", write_config(tmp_path), LINEAR, timeout=200)
    finally:
        on_ray.remove_node(blind)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"det-lite: error: {os.path.join(str(tmp_path), 'exp.yaml')}: Ray node "), line
    assert line.endswith(
        f"does not see the checkpoint storage {os.environ['DET_LITE_HOME']}/checkpoints: "
        "checkpoint_storage.host_path must be a file system every node mounts at the same path "
        "(or use s3, gcs or azure)"
    ), line
    assert json.loads(cli("experiment", "list", "--json", check=True).stdout) == []
