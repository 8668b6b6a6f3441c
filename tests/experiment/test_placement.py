"""Issue 23 part 2: the local executor places trials on devices (simulated with
$DET_LITE_DEVICES: no GPU here, the workers only see CUDA_VISIBLE_DEVICES) and records where
each run was placed; too many slots per trial are refused at create."""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests.cli_helpers import cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.fixtures.experiments.linear.model_def import closed_form

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

pytestmark = pytest.mark.timeout(240)


def write_config(tmp_path, **changes) -> str:
    return _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, "exp.yaml", **changes)


def _env(devices: str, slots: str = "") -> dict:
    env = dict(os.environ, DET_LITE_DEVICES=devices)
    env.pop("DET_LITE_SLOTS", None)
    if slots:
        env["DET_LITE_SLOTS"] = slots
    return env


def _seen(devices_dir) -> dict:
    """trial id -> {rank: (CUDA_VISIBLE_DEVICES, start time)} of every worker start."""
    seen: dict = {}
    for path in glob.glob(os.path.join(str(devices_dir), "*.json")):
        with open(path) as f:
            rec = json.load(f)
        seen.setdefault(rec["trial"], {})[rec["rank"]] = (rec["cuda"], rec["at"])
    return seen


def test_four_devices_run_two_slot_trials_two_at_a_time_on_disjoint_pairs(tmp_path):
    devices_dir = tmp_path / "seen"
    devices_dir.mkdir()
    lrs = [0.001, 0.002, 0.003, 0.004]
    path = write_config(
        tmp_path,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 8}},
            "resources": {"slots_per_trial": 2, "distributed_backend": "torch"},
            "hyperparameters.lr": {"type": "categorical", "vals": lrs},
            "hyperparameters.sleep_s": 0.2,
            "hyperparameters.devices_dir": str(devices_dir),
        },
    )
    proc = cli("experiment", "create", path, LINEAR, env=_env("0,1,2,3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = describe(1)["trials"]
    assert len(trials) == 4
    seen = _seen(devices_dir)
    spans = {}
    for t in trials:
        assert t["state"] == "COMPLETED"
        # 2 slots of 1 record each step as one batch of 2: the 1-slot closed form.
        w = closed_form(t["hparams"]["lr"], 8, batch_size=2, n=8)[-1]
        assert t["validation_metrics"][-1]["metrics"]["weight"] == pytest.approx(w, rel=1e-12)
        ranks = seen[t["id"]]
        assert sorted(ranks) == [0, 1]
        (cuda,) = {c for c, _ in ranks.values()}  # both ranks of a trial see the same pair
        assert cuda in ("0,1", "2,3")
        (run,) = t["runs"]
        assert run["devices"] == cuda.split(",") and run["slots"] == 2 and run["executor"] == "local"
        spans[t["id"]] = (cuda, min(at for _, at in ranks.values()), t["ended_at"])
    # Trials that ran at the same time held disjoint pairs; never more than two at once; and
    # the search did run two at a time (4 devices, 2 slots each).
    overlapping = 0
    for a, (ca, sa, _) in spans.items():
        at_once = [b for b, (_, sb, eb) in spans.items() if sb <= sa < eb]
        assert len(at_once) <= 2, spans
        for b in at_once:
            if b != a:
                overlapping += 1
                assert spans[b][0] != ca, spans
    assert overlapping >= 1, spans
    # The later trials reused the pairs the first two freed.
    first_two = sorted(spans, key=lambda i: spans[i][1])[:2]
    assert {spans[i][0] for i in first_two} == {"0,1", "2,3"}
    table = cli("experiment", "describe", "1", check=True).stdout
    assert " gpu 0,1" in table and " gpu 2,3" in table


def test_a_crashed_trial_frees_its_device_for_the_next(tmp_path):
    devices_dir = tmp_path / "seen"
    devices_dir.mkdir()
    path = write_config(
        tmp_path,
        **{
            "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 4}},
            "hyperparameters.fail_at": {"type": "categorical", "vals": [2, 100, 101]},
            "hyperparameters.devices_dir": str(devices_dir),
            "max_restarts": 0,
        },
    )
    proc = cli("experiment", "create", path, LINEAR, env=_env("7"))  # one device: one at a time
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the experiment completes
    trials = {t["hparams"]["fail_at"]: t for t in describe(1)["trials"]}
    assert trials[2]["state"] == "ERROR"
    assert trials[100]["state"] == trials[101]["state"] == "COMPLETED"
    seen = _seen(devices_dir)
    for t in trials.values():
        assert seen[t["id"]][0][0] == "7"
        assert [r["devices"] for r in t["runs"]] == [["7"]]
    assert "on " in proc.stdout and " gpu 7" in proc.stdout  # the start lines say where


@pytest.mark.parametrize(
    ("devices", "slots", "said"),
    [
        ("0,1", "", "this machine has 2 (GPUs 0,1; $DET_LITE_DEVICES to choose them) slots"),
        ("", "2", "this machine has 2 ($DET_LITE_SLOTS, else the cores) slots"),
    ],
    ids=["gpus", "cores"],
)
def test_more_slots_per_trial_than_the_machine_has_is_refused_at_create(tmp_path, devices, slots, said):
    path = write_config(
        tmp_path,
        **{
            "resources": {"slots_per_trial": 4, "distributed_backend": "torch"},
            "hyperparameters.global_batch_size": 4,
        },
    )
    proc = cli("experiment", "create", path, LINEAR, env=_env(devices, slots))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"det-lite: error: {path}: resources.slots_per_trial is 4 but {said}; lower slots_per_trial "
        "or list machines in resources.hosts"
    ]
    from determined_lite.store import Store

    assert Store().experiments.count() == 0
