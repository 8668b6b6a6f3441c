"""A Determined user's `det` habits with `det-lite` (issue 43): e wait, e list-trials, e set
name|description, e label, e fork, checkpoint describe, slot list, one line for Determined's
cluster commands, COLUMNS on piped tables with the varying hyperparameters first, and what
`activate --help` says. Run as a user does: `det-lite ...` in a subprocess (``cli()``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from determined_lite.store import Store
from tests.cli_helpers import REPO, cli, write_config

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
HPARAMS = [
    {"a_const": 1, "lr": 0.1, "momentum": 0.9, "units": 32, "z_name": "a-long-constant-name"},
    {"a_const": 1, "lr": 0.01, "momentum": 0.9, "units": 64, "z_name": "a-long-constant-name"},
    {"a_const": 1, "lr": 0.001, "momentum": 0.9, "units": 128, "z_name": "a-long-constant-name"},
]


def _search() -> int:
    """Experiment 1: a COMPLETED search of three trials whose lr and units vary."""
    with Store() as store:
        config = {"name": "search", "searcher": {"name": "grid"}}
        exp = store.experiments.create(config, "/ctx", "/ctx/e.yaml")
        for i, hp in enumerate(HPARAMS):
            trial = store.trials.create(exp, i, hp, seed=i)
            store.trials.update(trial, state="COMPLETED", total_batches=10 * (i + 1))
        store.experiments.set_state(exp, "COMPLETED")
    return exp


def _one_line_error(proc: subprocess.CompletedProcess, text: str) -> None:
    assert proc.returncode == 2, proc
    assert proc.stderr == f"det-lite: error: {text}\n"
    assert proc.stdout == ""


def test_wait_exits_0_only_for_completed_and_follows_the_state(tmp_path):
    with Store() as store:
        done = store.experiments.create({"name": "a"}, None, None)
        store.experiments.set_state(done, "COMPLETED")
        failed = store.experiments.create({"name": "b"}, None, None)
        store.experiments.set_state(failed, "ERROR")
        paused = store.experiments.create({"name": "c"}, None, None)
        store.experiments.set_state(paused, "PAUSED")
        orphan = store.experiments.create({"name": "d"}, None, None, pid=2**22 + 12345)  # no such process
        later = store.experiments.create({"name": "e"}, None, None)
    proc = cli("e", "wait", str(done))
    assert (proc.returncode, proc.stdout) == (0, f"experiment {done} COMPLETED\n")
    proc = cli("experiment", "wait", str(failed))
    assert (proc.returncode, proc.stdout) == (1, f"experiment {failed} ERROR\n")
    _one_line_error(
        cli("e", "wait", str(paused)),
        f"experiment {paused} is PAUSED; `det-lite experiment activate {paused}` resumes it",
    )
    # A runner that is gone is reconciled on read (issue 40 item 4): PAUSED, never ACTIVE.
    _one_line_error(
        cli("e", "wait", str(orphan)),
        f"experiment {orphan} is PAUSED; `det-lite experiment activate {orphan}` resumes it",
    )
    _one_line_error(cli("e", "wait", "99"), "experiment 99 not found")

    waiting = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "e", "wait", str(later), "--polling-interval", "0.1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        time.sleep(1.5)
        assert waiting.poll() is None  # ACTIVE: still waiting
        with Store() as store:
            store.experiments.set_state(later, "CANCELED")
        out, _ = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert (waiting.returncode, out) == (1, f"experiment {later} CANCELED\n")


def test_list_trials_and_describe_fit_columns_with_the_varying_hyperparameters_first():
    exp = _search()
    wide = cli("e", "list-trials", str(exp), check=True).stdout
    assert '{"lr":0.01,"units":64,"a_const":1,"momentum":0.9,"z_name":"a-long-constant-name"}' in wide
    assert max(len(line) for line in wide.splitlines()) > 80  # piped without COLUMNS: whole columns
    rows = [line.split("|") for line in wide.splitlines()[2:]]
    assert [(r[0].strip(), r[1].strip(), r[-1].strip()) for r in rows] == [
        ("1", "COMPLETED", "10"),
        ("2", "COMPLETED", "20"),
        ("3", "COMPLETED", "30"),
    ]
    env = dict(os.environ, COLUMNS="80")
    for args in (["e", "lt", str(exp)], ["e", "describe", str(exp)]):
        out = cli(*args, env=env, check=True).stdout
        assert max(len(line) for line in out.splitlines()) <= 80, out
        # The column is cut, its cells start with what was searched (not a_const, alphabetically first).
        for lr in ("0.1", "0.01", "0.001"):
            assert f'{{"lr":{lr},' in out or f" lr={lr} units=" in out, out
    listed = json.loads(cli("e", "lt", str(exp), "--json", check=True).stdout)
    assert [t["hparams"] for t in listed] == HPARAMS


def test_set_name_description_and_labels():
    exp = _search()
    assert (
        cli("e", "set", "name", str(exp), "baseline").stdout
        == f"Set name of experiment {exp} to 'baseline'\n"
    )
    proc = cli("e", "set", "description", str(exp), "lr sweep")
    assert proc.stdout == f"Set description of experiment {exp} to 'lr sweep'\n"
    assert cli("e", "label", "add", str(exp), "cpu").stdout == f"Added label 'cpu' to experiment {exp}\n"
    cli("e", "label", "add", str(exp), "v1", check=True)
    cli("e", "label", "add", str(exp), "v1", check=True)
    proc = cli("e", "label", "remove", str(exp), "v1")
    assert proc.stdout == f"Removed label 'v1' from experiment {exp}\n"
    described = json.loads(cli("e", "describe", str(exp), "--json", check=True).stdout)[0]["experiment"]
    assert (described["name"], described["description"], described["labels"]) == (
        "baseline",
        "lr sweep",
        ["cpu"],
    )
    assert "baseline" in cli("e", "list", check=True).stdout
    assert Store().experiments.annotations(exp)["labels"] == ["cpu"]
    _one_line_error(cli("e", "set", "name", str(exp), " "), "an experiment's name must not be empty or blank")
    _one_line_error(cli("e", "label", "add", "42", "x"), "experiment 42 not found")


@pytest.mark.parametrize(
    "args, first_words",
    [
        (
            ["agent", "list"],
            "`det agent` is not in det-lite: det-lite runs on this machine, without a master",
        ),
        (["task", "list"], "`det task` is not in det-lite"),
        (["notebook", "start", "--config", "x=1"], "`det notebook` is not in det-lite"),
        (["cmd", "run", "echo hi"], "`det cmd` is not in det-lite"),
        (["shell", "start"], "`det shell` is not in det-lite"),
        (["user", "login", "admin"], "`det user` is not in det-lite"),
        (["master", "info"], "`det master` is not in det-lite"),
        (["job", "list"], "`det job` is not in det-lite"),
        (["template", "list"], "`det template` is not in det-lite"),
        (["deploy", "aws", "up"], "`det deploy` is not in det-lite"),
        (["project", "list", "ws"], "`det project` is not in det-lite"),
        (["workspace", "list"], "`det workspace` is not in det-lite"),
        (
            ["e", "continue", "1", "--config", "a=b"],
            "`det experiment continue` is not in det-lite: `det-lite experiment activate ID`",
        ),
        (["e", "archive", "1"], "`det experiment archive` is not in det-lite"),
        (["e", "cancel", "1"], "`det experiment cancel` is not in det-lite: `det-lite experiment kill ID`"),
        (
            ["e", "lc", "1"],
            "`det experiment lc` is not in det-lite: `det-lite checkpoint list --experiment ID`",
        ),
        (["checkpoint", "delete", "abc"], "`det checkpoint delete` is not in det-lite"),
    ],
)
def test_determineds_cluster_commands_say_what_to_use_instead(args, first_words):
    proc = cli(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"det-lite: error: {first_words}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_activate_and_create_help_say_they_run_in_the_foreground():
    text = " ".join(cli("e", "activate", "--help", check=True).stdout.split())
    assert "runs the experiment in this terminal" in text and "--detach runs it in the background" in text
    assert "Ctrl-C pauses it again" in text
    text = " ".join(cli("e", "create", "--help", check=True).stdout.split())
    assert "Ctrl-C pauses it" in text


def test_checkpoint_describe(tmp_path):
    with Store() as store:
        exp = store.experiments.create({"name": "x"}, None, None)
        trial = store.trials.create(exp, 0, {"lr": 0.1}, 1)
        path = tmp_path / "ckpts" / "0123abcd-uuid"
        path.mkdir(parents=True)
        (path / "metadata.json").write_text(json.dumps({"steps_completed": 20, "hparams": {"lr": 0.1}}))
        store.checkpoints.add(trial, "0123abcd-uuid", str(path), 20, {"loss": 0.125})
    Store().models.create("digits")
    Store().models.add_version("digits", "0123abcd-uuid")
    lines = cli("checkpoint", "describe", "0123", check=True).stdout.splitlines()
    assert lines[:5] == [
        "Checkpoint UUID:    0123abcd-uuid",
        f"Experiment ID:      {exp}",
        f"Trial ID:           {trial}",
        "Steps Completed:    20",
        "State:              COMPLETED",
    ]
    assert lines[6:] == [
        "Validation Metrics: loss=0.125",
        "Metadata:           hparams={...} steps_completed=20",
        "Model Versions:     model 'digits' version 1",
        f"Path:               {path}",
    ]
    found = json.loads(cli("c", "describe", "0123abcd-uuid", "--json", check=True).stdout)
    assert found["metadata"] == {"steps_completed": 20, "hparams": {"lr": 0.1}}
    assert found["model_versions"] == "model 'digits' version 1" and found["total_batches"] == 20


def test_slot_list_shows_devices_or_cores_and_the_trial_holding_one():
    host = socket.gethostname()
    with Store() as store:
        exp = store.experiments.create({"name": "running"}, None, None, pid=os.getpid())
        trial = store.trials.create(exp, 0, {}, 1)
        store.trials.add_run(trial, executor="local", host=host, slots=1, devices=["1"])
    gpus = cli("slot", "list", "--json", env=dict(os.environ, DET_LITE_DEVICES="0,1"), check=True).stdout
    assert json.loads(gpus) == [
        {"Node": host, "Slot ID": 0, "Type": "cuda", "Device": "0", "Trial": ""},
        {"Node": host, "Slot ID": 1, "Type": "cuda", "Device": "1", "Trial": trial},
    ]
    cores = cli(
        "slot", "list", "--csv", env=dict(os.environ, DET_LITE_DEVICES="", DET_LITE_SLOTS="3"), check=True
    )
    assert cores.stdout == "".join(
        ["Node,Slot ID,Type,Device,Trial\n"] + [f"{host},{i},cpu,,\n" for i in range(3)]
    )


@pytest.mark.timeout(300)
@pytest.mark.xdist_group("ray")  # with the Ray executor's modules: one cluster at a time
def test_slot_list_of_a_ray_cluster(shared_ray_cluster):
    proc = cli("slot", "list", "--ray", "--address", shared_ray_cluster.address, "--json", check=True)
    slots = json.loads(proc.stdout)
    assert [(s["Slot ID"], s["Type"], s["Trial"]) for s in slots] == [(0, "cpu", ""), (0, "cpu", "")]
    assert len({s["Node"] for s in slots}) == 2  # a head and a worker node of 1 CPU each


@pytest.mark.timeout(300)
def test_fork_runs_another_experiments_config_and_code_with_overrides(tmp_path):
    config = write_config(os.path.join(LINEAR, "const.yaml"), tmp_path)
    cli("experiment", "create", config, LINEAR, check=True)
    proc = cli(
        "e", "fork", "1", "--config", "hyperparameters.lr=0.02", "--config", "searcher.max_length.batches=4"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Forking experiment 1\nCreated experiment 2\n" in proc.stdout
    with Store() as store:
        (trial,) = store.trials.list(2)
        forked = store.experiments.get(2)
    assert trial["hparams"]["lr"] == 0.02 and trial["total_batches"] == 4 and trial["state"] == "COMPLETED"
    assert forked["config"]["searcher"]["max_length"] == {"batches": 4}
    assert forked["name"] == "linear-const"

    other = tmp_path / "other.yaml"
    with open(config) as f:
        loaded = yaml.safe_load(f)
    loaded["name"] = "from-a-file"
    loaded["searcher"]["max_length"] = {"batches": 2}
    other.write_text(yaml.safe_dump(loaded))
    cli("e", "fork", "2", "--config-file", str(other), check=True)
    with Store() as store:
        assert store.experiments.get(3)["name"] == "from-a-file"
        assert [t["total_batches"] for t in store.trials.list(3)] == [2]
    _one_line_error(cli("e", "fork", "9"), "experiment 9 not found")
