"""The det-lite CLI on a store filled through the Store API: list, describe, logs, trials,
checkpoints, pause/kill/activate/delete, tensorboard; exit codes; no torch on read paths."""

import datetime
import json
import os
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from determined_lite.cli import _logs, cli
from determined_lite.store import Store, tensorboard_dir
from determined_lite.store._logs import Logs
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = {"name": "digits", "searcher": {"name": "grid", "metric": "loss"}, "entrypoint": "model_def:Trial"}


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def store(_det_lite_home):
    s = Store()
    yield s
    s.close()


def _checkpoint_dir(home, uuid, content):
    path = os.path.join(str(home), "checkpoints", uuid)
    os.makedirs(os.path.join(path, "code"))
    with open(os.path.join(path, "metadata.json"), "w") as f:
        f.write(content)
    with open(os.path.join(path, "code", "model_def.py"), "w") as f:
        f.write("# trial code\n")
    return path


@pytest.fixture
def filled(store, _det_lite_home):
    """Experiment 1 (two trials, metrics, checkpoints, logs) and experiment 2 (empty, COMPLETED)."""
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    t1 = store.trials.create(exp_id, 0, {"lr": 0.1, "global_batch_size": 32}, 11)
    t2 = store.trials.create(exp_id, 1, {"lr": 0.01, "global_batch_size": 32}, 12)
    store.metrics.add_training(t1, 10, {"loss": 0.5})
    store.metrics.add_training(t1, 20, {"loss": 0.25})
    store.metrics.add_validation(t1, 20, {"loss": 0.125, "acc": float("nan")})
    path_a = _checkpoint_dir(_det_lite_home, "uuid-a", '{"total_batches": 20}')
    store.checkpoints.add(t1, "uuid-a", path_a, 20, {"loss": 0.125})
    store.trials.update(t1, state="COMPLETED", best_validation=0.125)
    store.metrics.add_training(t2, 10, {"loss": 0.75})
    path_b = _checkpoint_dir(_det_lite_home, "uuid-b", '{"total_batches": 10}')
    store.checkpoints.add(t2, "uuid-b", path_b, 10)
    store.logs.add(None, ["searcher: grid of 2 trials"], experiment_id=exp_id)
    store.logs.add(t1, [(0, "epoch 1"), (1, "epoch 1 on rank 1")])
    store.logs.add(t2, ["hello from trial 2"])
    done = store.experiments.create({"name": "done"}, "/d", "/d/e.yaml")
    store.experiments.set_state(done, "COMPLETED")
    tb = tensorboard_dir(exp_id)
    os.makedirs(os.path.join(tb, f"trial_{t1}"))
    run_dir = os.path.join(str(_det_lite_home), "experiments", str(exp_id))
    os.makedirs(run_dir)
    os.makedirs(os.path.join(str(_det_lite_home), "experiments", str(done)))
    return {
        "exp": exp_id,
        "trials": (t1, t2),
        "done": done,
        "paths": (path_a, path_b),
        "tb": tb,
        "run_dir": run_dir,
    }


# --- list / describe ------------------------------------------------------------------------


def test_experiment_list_table(filled):
    result = run("experiment", "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == [
        "ID",
        "Name",
        "State",
        "Trials",
        "Start Time",
        "End Time",
    ]
    assert set(lines[1]) <= {"-", "+"}
    first = [c.strip() for c in lines[2].split("|")]
    assert first[:4] == ["1", "digits", "ACTIVE", "2"]
    second = [c.strip() for c in lines[3].split("|")]
    assert second[:4] == ["2", "done", "COMPLETED", "0"]
    assert second[5] != ""  # end time
    assert len(lines) == 4
    assert run("e", "ls").stdout == result.stdout  # aliases


def test_experiment_list_json(filled):
    result = run("experiment", "list", "--json")
    assert result.exit_code == 0
    exps = json.loads(result.stdout)
    assert [(e["id"], e["name"], e["state"], e["num_trials"], e["config"]) for e in exps] == [
        (1, "digits", "ACTIVE", 2, CONFIG),
        (2, "done", "COMPLETED", 0, {"name": "done"}),
    ]


def test_experiment_list_shows_newest_100_unless_all(store):
    for i in range(101):
        store.experiments.create({"name": f"e{i}"}, "/c", "/c/e.yaml")
    result = run("experiment", "list", "--json")
    assert [e["id"] for e in json.loads(result.stdout)] == list(range(2, 102))
    table = run("experiment", "list")
    assert len(table.stdout.splitlines()) == 2 + 100
    assert "the newest 100 of 101 experiments; --all lists every one" in table.stderr
    everything = run("experiment", "list", "--all", "--json")
    assert [e["id"] for e in json.loads(everything.stdout)] == list(range(1, 102))


def test_experiment_list_marks_requests_and_dead_processes(store):
    exp_id = store.experiments.create(CONFIG, "/c", "/c/e.yaml")
    store.experiments.set_pid(exp_id, os.getpid())
    store.requests.request(exp_id, "kill")
    assert "ACTIVE (kill requested)" in run("experiment", "list").stdout
    store.requests.clear(exp_id)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    store.experiments.set_pid(exp_id, child.pid)
    # The runner is gone but a process it started still holds the runner lock: not running...
    from determined_lite.experiment._lock import take_runner_lock

    lock = take_runner_lock(exp_id, wait_s=0)
    try:
        assert "ACTIVE (not running)" in run("experiment", "list").stdout
    finally:
        lock.release()
    # ... and once none does, the next command finds it PAUSED (issue 40, item 4).
    assert " PAUSED " in run("experiment", "list").stdout
    assert store.experiments.get(exp_id)["state"] == "PAUSED"


def test_experiment_describe_json_is_determineds_form(filled, store):
    """Determined's ``det experiment describe --json``: a list of ``GetExperimentResponse``s,
    the experiment alone (no trials, no workloads)."""
    result = run("experiment", "describe", "1", "--json")
    assert result.exit_code == 0
    (described,) = json.loads(result.stdout)
    assert set(described) == {"experiment", "config", "jobSummary"}
    exp = described["experiment"]
    recorded = store.experiments.get(1)
    assert described["config"] == exp["config"] == CONFIG
    assert described["jobSummary"] is None
    t1, t2 = filled["trials"]
    assert {k: exp[k] for k in ("id", "name", "state", "searcherType", "searcherMetric", "archived")} == {
        "id": 1,
        "name": "digits",
        "state": "STATE_ACTIVE",
        "searcherType": "grid",
        "searcherMetric": "loss",
        "archived": False,
    }
    assert (exp["numTrials"], exp["trialIds"], exp["checkpointCount"]) == (2, [t1, t2], 2)
    # Only trial 1 validated: it is the best (loss, smaller is better).
    assert (exp["bestTrialId"], exp["bestTrialSearcherMetric"]) == (t1, 0.125)
    started = datetime.datetime.fromisoformat(exp["startTime"].replace("Z", "+00:00"))
    assert started.timestamp() == pytest.approx(recorded["created_at"], abs=1e-5)
    assert exp["startTime"].endswith("Z") and exp["endTime"] is None and exp["duration"] is None
    assert "trials" not in exp and "trials" not in described
    # Every field Determined's bindings require to read it back (v1Experiment's keyword-only
    # arguments without a default, harness/determined/common/api/bindings.py).
    required = {"archived", "config", "id", "jobId", "name", "numTrials", "originalConfig", "projectId"}
    required |= {"projectOwnerId", "searcherType", "startTime", "state", "username"}
    assert required <= set(exp)
    assert json.loads(exp["originalConfig"]) == CONFIG

    both = json.loads(run("experiment", "describe", "1,2", "--json").stdout)
    assert [(d["experiment"]["id"], d["experiment"]["state"]) for d in both] == [
        (1, "STATE_ACTIVE"),
        (2, "STATE_COMPLETED"),
    ]
    done = both[1]["experiment"]
    ended = store.experiments.get(2)
    assert done["numTrials"] == 0 and done["bestTrialId"] is None
    assert done["duration"] == round((ended["ended_at"] - ended["created_at"]) * 1000)

    # The best trial follows searcher.smaller_is_better (Determined's default: True, above).
    larger = dict(CONFIG, searcher={"name": "grid", "metric": "acc", "smaller_is_better": False})
    exp3 = store.experiments.create(larger, "/ctx", "/ctx/exp.yaml")
    for request, acc in enumerate((0.5, 0.9, 0.7)):
        store.trials.update(store.trials.create(exp3, request, {}, request), best_validation=acc)
    (third,) = json.loads(run("experiment", "describe", str(exp3), "--json").stdout)
    trial_ids = third["experiment"]["trialIds"]
    assert (third["experiment"]["bestTrialId"], third["experiment"]["bestTrialSearcherMetric"]) == (
        trial_ids[1],
        0.9,
    )


def test_experiment_describe_ids_are_checked(filled):
    for bad in ("1,x", "0", ","):
        result = run("experiment", "describe", bad)
        assert result.exit_code == 2
        assert "expected an experiment id or a comma-separated list of them" in result.output
    missing = run("experiment", "describe", "1,9")
    assert missing.exit_code == 2 and "experiment 9 not found" in missing.output


def _workload_rows(out):
    workloads = out.split("Workloads:\n")[1].splitlines()
    return [[c.strip() for c in line.split("|")] for line in workloads[2:]]


def test_experiment_describe_table(filled):
    result = run("experiment", "describe", "1")
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("Experiment:\n")
    assert "Trials:" in out and "Workloads:" in out
    # Trial 1's report at batch 10 has no validation or checkpoint and is not its latest.
    assert _workload_rows(out) == [
        ["1", "20", "loss=0.25", "acc=nan loss=0.125", "uuid-a"],
        ["2", "10", "loss=0.75", "", "uuid-b"],
    ]
    assert "--all-workloads shows every training report" in result.stderr
    assert _workload_rows(run("experiment", "describe", "1", "--all-workloads").stdout) == [
        ["1", "10", "loss=0.5", "", ""],
        ["1", "20", "loss=0.25", "acc=nan loss=0.125", "uuid-a"],
        ["2", "10", "loss=0.75", "", "uuid-b"],
    ]
    trials = out.split("Trials:\n")[1].split("\n\n")[0].splitlines()
    first = [c.strip() for c in trials[2].split("|")]
    # lr differs across the trials: it comes first (issue 43); global_batch_size is the same.
    assert first[:8] == ["1", "COMPLETED", "lr=0.1 global_batch_size=32", "11", "20", "0", "0.125", "uuid-a"]


@pytest.fixture
def long_trial(store):
    """Experiment 1: one trial of 10 training reports (loss 1/n at batch 10n), validations at
    batches 30 and 60, a checkpoint at 60 and one at 75 (between reports)."""
    exp = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp, 0, {"lr": 0.1}, 1)
    for n in range(1, 11):
        store.metrics.add_training(trial, 10 * n, {"loss": 1 / n})
    store.metrics.add_validation(trial, 30, {"val_loss": 0.5})
    store.metrics.add_validation(trial, 60, {"val_loss": 0.25})
    store.checkpoints.add(trial, "ckpt-60", "/c/60", 60)
    store.checkpoints.add(trial, "ckpt-75", "/c/75", 75)
    return trial


def test_describe_workloads_show_validations_checkpoints_and_the_latest_report(long_trial):
    """Determined's condensed rows (training, validation and checkpoint of a batch count in one
    row); by default only the batch counts with a validation or a checkpoint, and the latest
    training report; --all-workloads every report; --csv every row, as Determined's CLI."""
    result = run("experiment", "describe", "1")
    assert _workload_rows(result.stdout) == [
        [str(long_trial), "30", "loss=0.333333", "val_loss=0.5", ""],
        [str(long_trial), "60", "loss=0.166667", "val_loss=0.25", "ckpt-60"],
        [str(long_trial), "75", "", "", "ckpt-75"],
        [str(long_trial), "100", "loss=0.1", "", ""],
    ]
    assert "--all-workloads shows every training report" in result.stderr
    every = run("experiment", "describe", "1", "--all-workloads")
    rows = _workload_rows(every.stdout)
    assert [r[1] for r in rows] == ["10", "20", "30", "40", "50", "60", "70", "75", "80", "90", "100"]
    assert rows[0] == [str(long_trial), "10", "loss=1", "", ""]
    assert rows[5] == [str(long_trial), "60", "loss=0.166667", "val_loss=0.25", "ckpt-60"]
    assert "--all-workloads" not in every.stderr
    csv_rows = run("experiment", "describe", "1", "--csv").stdout.split("Workloads:\n")[1].splitlines()
    assert len(csv_rows) == 1 + 11 and csv_rows[8] == f"{long_trial},75,,,ckpt-75"
    same = run("trial", "describe", str(long_trial), "--metrics")
    assert _workload_rows(same.stdout) == [
        [str(long_trial), "30", "0.333333", "0.5", ""],
        [str(long_trial), "60", "0.166667", "0.25", "ckpt-60"],
        [str(long_trial), "75", "", "", "ckpt-75"],
        [str(long_trial), "100", "0.1", "", ""],
    ]


def test_describe_metric_columns_come_from_the_rows_shown(long_trial, store):
    """--metrics names the metrics of the rows it shows: a metric reported only in a training
    report that the default table leaves out gets a column with --all-workloads (read in a
    first pass over every row) and in CSV."""
    store.metrics.add_training(long_trial, 40, {"loss": 0.25, "grad_norm": 3.5})
    default = run("experiment", "describe", "1", "--metrics").stdout.split("Workloads:\n")[1]
    assert "grad_norm" not in default
    every = run("experiment", "describe", "1", "--metrics", "--all-workloads").stdout
    header = [c.strip() for c in every.split("Workloads:\n")[1].splitlines()[0].split("|")]
    assert header == [
        "Trial ID",
        "# of Batches",
        "Training Metric: grad_norm",
        "Training Metric: loss",
        "Validation Metric: val_loss",
        "Checkpoint",
    ]
    rows = _workload_rows(every)
    assert rows[3] == [str(long_trial), "40", "3.5", "0.25", "", ""]
    assert rows[5] == [str(long_trial), "60", "", "0.166667", "0.25", "ckpt-60"]
    csv_lines = run("experiment", "describe", "1", "--metrics", "--csv").stdout.split("Workloads:\n")[1]
    assert f"{long_trial},40,3.5,0.25,," in csv_lines.splitlines()


def test_trial_describe(filled, store):
    t1, t2 = filled["trials"]
    result = run("trial", "describe", str(t2), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == store.trials.describe(t2)
    table = run("t", "describe", str(t1))
    assert table.exit_code == 0
    assert table.stdout.startswith(f"Trial {t1} of experiment 1:\n")
    assert "acc=nan loss=0.125" in table.stdout


# --- logs -----------------------------------------------------------------------------------


def test_experiment_logs(filled):
    t1, t2 = filled["trials"]
    result = run("experiment", "logs", "1")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "[experiment 1] searcher: grid of 2 trials",
        f"[trial {t1}] [rank 0] epoch 1",
        f"[trial {t1}] [rank 1] epoch 1 on rank 1",
        f"[trial {t2}] hello from trial 2",
    ]
    assert run("experiment", "logs", "1", "--tail", "2").stdout.splitlines() == [
        f"[trial {t1}] [rank 1] epoch 1 on rank 1",
        f"[trial {t2}] hello from trial 2",
    ]
    assert run("experiment", "logs", "2").stdout == ""
    stamped = run("experiment", "logs", "1", "--tail", "1", "--timestamps").stdout
    assert stamped.startswith("[20") and stamped.rstrip().endswith(f"Z] [trial {t2}] hello from trial 2")


def test_trial_logs(filled):
    t1, _ = filled["trials"]
    result = run("trial", "logs", str(t1))
    assert result.stdout.splitlines() == ["[rank 0] epoch 1", "[rank 1] epoch 1 on rank 1"]
    assert run("trial", "logs", str(t1), "--tail", "1").stdout.splitlines() == ["[rank 1] epoch 1 on rank 1"]


def test_follow_prints_lines_written_meanwhile_and_stops_with_the_experiment(store, monkeypatch):
    monkeypatch.setattr(_logs, "POLL_SECONDS", 0.01)
    exp_id = store.experiments.create(CONFIG, "/c", "/c/e.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    store.experiments.set_pid(exp_id, os.getpid())
    store.logs.add(trial, ["line 0"])
    following = threading.Event()
    original_logs = Logs.list

    def logs_and_signal(self, *args, **kwargs):
        following.set()
        return original_logs(self, *args, **kwargs)

    def writer():  # writes only once `logs -f` has started reading
        following.wait()
        for i in range(1, 51):
            store.logs.add(trial, [f"line {i}"])
        store.trials.update(trial, state="COMPLETED")
        store.experiments.set_state(exp_id, "COMPLETED")

    monkeypatch.setattr(Logs, "list", logs_and_signal)
    thread = threading.Thread(target=writer)
    thread.start()
    result = run("experiment", "logs", str(exp_id), "--follow")
    thread.join()
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"[trial {trial}] line {i}" for i in range(51)]
    # Following a finished trial prints what there is and returns.
    assert run("trial", "logs", str(trial), "-f").stdout.splitlines() == [f"line {i}" for i in range(51)]


# --- checkpoints ----------------------------------------------------------------------------


def test_checkpoint_list(filled, store):
    t1, t2 = filled["trials"]
    result = run("checkpoint", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == store.checkpoints.list()
    assert [c["uuid"] for c in json.loads(result.stdout)] == ["uuid-a", "uuid-b"]
    by_trial = json.loads(run("checkpoint", "list", "--trial", str(t2), "--json").stdout)
    assert [(c["uuid"], c["trial_id"], c["total_batches"]) for c in by_trial] == [("uuid-b", t2, 10)]
    by_exp = json.loads(run("c", "ls", "--experiment", "2", "--json").stdout)
    assert by_exp == []
    table = run("checkpoint", "list", "--experiment", "1").stdout.splitlines()
    assert [c.strip() for c in table[0].split("|")][:4] == [
        "UUID",
        "Experiment ID",
        "Trial ID",
        "# of Batches",
    ]
    assert [[c.strip() for c in line.split("|")][:6] for line in table[2:]] == [
        ["uuid-a", "1", str(t1), "20", "COMPLETED", "loss=0.125"],
        ["uuid-b", "1", str(t2), "10", "COMPLETED", ""],
    ]


def test_checkpoint_list_bad_filters(filled):
    both = run("checkpoint", "list", "--experiment", "1", "--trial", "1")
    assert both.exit_code == 2
    assert "give --experiment or --trial, not both" in both.stderr
    unknown = run("checkpoint", "list", "--experiment", "9")
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, "det-lite: error: experiment 9 not found")
    unknown = run("checkpoint", "list", "--trial", "9")
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, "det-lite: error: trial 9 not found")


def test_checkpoint_export_copies_the_directory(filled, tmp_path):
    dest = tmp_path / "out" / "ckpt"
    result = run("checkpoint", "export", "uuid-a", str(dest))
    assert result.exit_code == 0, result.stderr
    assert (dest / "metadata.json").read_text() == '{"total_batches": 20}'
    assert (dest / "code" / "model_def.py").read_text() == "# trial code\n"
    assert sorted(os.listdir(dest.parent)) == ["ckpt"]  # no staging leftovers
    assert os.path.isdir(filled["paths"][0])  # the original stays
    again = run("checkpoint", "export", "uuid-a", str(dest))
    assert again.exit_code == 2
    assert f"{dest} exists and is not an empty directory" in again.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("checkpoint", "download", "uuid-b", str(empty)).exit_code == 0  # Determined's name
    assert (empty / "metadata.json").read_text() == '{"total_batches": 10}'


def test_checkpoint_export_errors(filled, store, tmp_path):
    unknown = run("checkpoint", "export", "no-such-uuid", str(tmp_path / "x"))
    message = "det-lite: error: checkpoint no-such-uuid not found"
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, message)
    store.checkpoints.add(filled["trials"][1], "uuid-gone", str(tmp_path / "gone"), 30)
    missing = run("checkpoint", "export", "uuid-gone", str(tmp_path / "y"))
    assert missing.exit_code == 1
    assert f"directory {tmp_path / 'gone'} is missing" in missing.stderr
    assert not (tmp_path / "y").exists()


# --- pause / kill / activate / delete -------------------------------------------------------


def test_pause_and_kill_without_a_running_process(filled, store):
    t1, t2 = filled["trials"]
    result = run("experiment", "pause", "1")
    assert result.exit_code == 0
    assert result.stdout.strip() == "Experiment 1 had no running process; it is now PAUSED."
    assert store.experiments.get(1)["state"] == "PAUSED"
    assert store.trials.get(t2)["state"] == "PAUSED"
    assert run("experiment", "pause", "1").stdout.strip() == "Experiment 1 is already PAUSED; nothing to do."
    result = run("experiment", "kill", "1")
    assert result.stdout.strip() == "Experiment 1 had no running process; it is now CANCELED."
    assert (store.experiments.get(1)["state"], store.trials.get(t2)["state"]) == ("CANCELED", "CANCELED")
    assert store.trials.get(t1)["state"] == "COMPLETED"
    assert (
        run("experiment", "kill", "2").stdout.strip() == "Experiment 2 is already COMPLETED; nothing to do."
    )


def test_pause_and_kill_with_a_running_process_write_requests(filled, store):
    store.experiments.set_pid(1, os.getpid())
    result = run("experiment", "pause", "1")
    assert result.exit_code == 0
    assert result.stdout.startswith("Requested pause of experiment 1;")
    assert (store.requests.pending(1), store.experiments.get(1)["state"]) == ("pause", "ACTIVE")
    # activate on a running experiment withdraws the pause request
    withdrawn = run("experiment", "activate", "1")
    assert withdrawn.exit_code == 0
    assert "pause request is withdrawn" in withdrawn.stdout
    assert store.requests.pending(1) is None
    # a second runner is refused, naming the process that runs the experiment (one runner each)
    again = run("experiment", "activate", "1")
    assert again.exit_code == 2
    assert again.stderr.strip() == (
        f"det-lite: error: experiment 1 is already running in process {os.getpid()}; "
        "pause or kill it first (det-lite experiment pause 1)"
    )
    run("experiment", "kill", "1")
    assert (store.requests.pending(1), store.experiments.get(1)["state"]) == ("kill", "ACTIVE")


def test_activate_refuses_finished_experiments(filled):
    result = run("experiment", "activate", "2")
    assert result.exit_code == 2
    # issue 29.14: activate also resumes an ACTIVE experiment whose runner died; the message says so
    assert result.stderr.strip() == (
        "det-lite: error: experiment 2 is COMPLETED; only a PAUSED experiment, "
        "or an ACTIVE one whose process died, can be activated"
    )


def test_activate_calls_the_experiment_layer(filled, store, monkeypatch):
    import determined_lite.experiment as experiment

    calls = []

    def fake_activate(experiment_id, detach):
        calls.append((experiment_id, detach))
        return 1

    monkeypatch.setattr(experiment, "activate_experiment", fake_activate, raising=False)
    store.experiments.set_state(1, "PAUSED")
    result = run("experiment", "activate", "1", "--detach")
    assert (result.exit_code, calls) == (1, [(1, True)])


def test_delete_refuses_an_active_experiment(filled, store):
    result = run("experiment", "delete", "1", "--yes")
    assert result.exit_code == 2
    assert "experiment 1 is ACTIVE; kill or pause it before deleting it" in result.stderr
    assert store.experiments.get(1) is not None


def test_delete_removes_rows_checkpoints_and_tensorboard_files(filled, store, tmp_path):
    outside = tmp_path / "not-a-uuid-dir"
    outside.mkdir()
    store.checkpoints.add(filled["trials"][1], "uuid-x", str(outside), 40)
    run("experiment", "kill", "1")
    declined = run("experiment", "delete", "1", input="n\n")
    assert declined.exit_code == 1
    assert store.experiments.get(1) is not None and os.path.isdir(filled["paths"][0])
    result = run("experiment", "delete", "1", input="y\n")
    assert result.exit_code == 0, result.stderr
    assert "Deleted experiment 1 (3 checkpoint(s))." in result.stdout
    assert store.experiments.get(1) is None
    assert store.checkpoints.list() == []
    assert not any(os.path.exists(p) for p in filled["paths"])
    assert not os.path.exists(filled["tb"])
    assert not os.path.exists(filled["run_dir"])
    assert os.path.isdir(os.path.join(os.path.dirname(filled["run_dir"]), str(filled["done"])))
    assert outside.is_dir()  # not a <uuid> directory: left alone, with a warning
    assert f"left checkpoint uuid-x at {outside}" in result.stderr
    assert [e["id"] for e in store.experiments.list()] == [2]


# --- tensorboard ----------------------------------------------------------------------------


def test_tensorboard_command(filled):
    result = run("tensorboard", "1", "--no-launch", "--port", "7007", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "logdir": filled["tb"],
        "command": [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            filled["tb"],
            "--port",
            "7007",
            "--host",
            "127.0.0.1",
        ],
    }
    plain = run("tensorboard", "1", "--no-launch").stdout.strip()
    assert plain.endswith(f"--logdir {filled['tb']} --port 6006 --host 127.0.0.1")


# --- create wiring --------------------------------------------------------------------------


def test_create_validates_arguments_before_running(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text("name: x\n")
    missing = run("experiment", "create", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    bad = run("experiment", "create", str(config), str(tmp_path), "--config", "no-equals-sign")
    assert bad.exit_code == 2
    assert "expected KEY=VALUE" in bad.stderr


def test_create_maps_config_errors_to_exit_2(tmp_path, monkeypatch):
    import determined_lite.config as config_module
    import determined_lite.experiment as experiment

    ConfigError = getattr(config_module, "ConfigError", None)  # noqa: N806
    if ConfigError is None:  # until the config layer defines it

        class ConfigError(ValueError):
            pass

        monkeypatch.setattr(config_module, "ConfigError", ConfigError, raising=False)
    error = ConfigError("expected a string, got 3")
    calls = []

    def fake_create(config_path, context_dir, overrides, detach, test):
        calls.append((config_path, context_dir, overrides, detach, test))
        if overrides:
            raise error
        return 1

    monkeypatch.setattr(experiment, "create_experiment", fake_create, raising=False)
    config = tmp_path / "exp.yaml"
    config.write_text("name: x\n")
    failed = run("experiment", "create", str(config), str(tmp_path), "--test")
    assert failed.exit_code == 1
    bad = run("e", "create", str(config), str(tmp_path), "--config", "searcher.metric=3", "--detach")
    assert bad.exit_code == 2
    assert bad.stderr.strip() == f"det-lite: error: {error}"
    assert "expected a string, got 3" in bad.stderr and "Traceback" not in bad.output
    assert calls == [
        (str(config), str(tmp_path), [], False, True),
        (str(config), str(tmp_path), ["searcher.metric=3"], True, False),
    ]


# --- exit codes, speed, imports -------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["experiment", "describe", "7"], "experiment 7 not found"),
        (["experiment", "logs", "7"], "experiment 7 not found"),
        (["experiment", "pause", "7"], "experiment 7 not found"),
        (["experiment", "kill", "7"], "experiment 7 not found"),
        (["experiment", "activate", "7"], "experiment 7 not found"),
        (["experiment", "delete", "7", "--yes"], "experiment 7 not found"),
        (["trial", "describe", "7"], "trial 7 not found"),
        (["trial", "logs", "7"], "trial 7 not found"),
        (["tensorboard", "7", "--no-launch"], "experiment 7 not found"),
    ],
)
def test_unknown_ids_exit_2(filled, args, message):
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"det-lite: error: {message}"


@pytest.mark.parametrize(
    "args",
    [
        ["experiment", "describe", "abc"],
        ["experiment", "list", "--bogus"],
        ["experiment", "logs", "1", "--tail", "-1"],
        ["nonsense"],
        ["trial", "describe"],
    ],
)
def test_bad_arguments_exit_2(filled, args):
    assert run(*args).exit_code == 2


_NO_TORCH = """
import sys
from determined_lite.cli import cli
for args in (["e", "list"], ["e", "list", "--json"], ["e", "describe", "1"], ["e", "describe", "1", "--json"],
             ["e", "logs", "1"], ["t", "describe", "1"], ["t", "logs", "1"], ["c", "list"],
             ["tensorboard", "1", "--no-launch"], ["e", "pause", "1"]):
    try:
        cli.main(args=args, prog_name="det-lite", standalone_mode=False)
    except SystemExit as e:
        assert not e.code, (args, e.code)
heavy = sorted(m for m in ("torch", "pydantic", "numpy", "yaml") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_read_commands_do_not_import_torch(filled):
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", _NO_TORCH], env=env, capture_output=True, text=True, timeout=budget(120)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []"


@pytest.mark.slow
def test_module_entry_point_exit_codes(filled):
    env = dict(os.environ, PYTHONPATH=REPO)
    ok = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", "e", "describe", "1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=budget(120),
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["experiment"]["id"] == 1
    missing = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "describe", "7"],
        env=env,
        capture_output=True,
        text=True,
        timeout=budget(120),
    )
    assert (missing.returncode, missing.stderr.strip()) == (2, "det-lite: error: experiment 7 not found")


def test_checkpoint_download_with_determineds_output_dir_option(filled, tmp_path, monkeypatch):
    dest = tmp_path / "dl"
    result = run("checkpoint", "download", "uuid-a", "-o", str(dest))  # `det checkpoint download -o`
    assert result.exit_code == 0, result.stderr
    assert (dest / "metadata.json").read_text() == '{"total_batches": 20}'
    assert run("checkpoint", "download", "uuid-b", "--output-dir", str(tmp_path / "dl2")).exit_code == 0
    monkeypatch.chdir(tmp_path)
    neither = run("checkpoint", "download", "uuid-a")  # Determined's default: checkpoints/<uuid>
    assert neither.exit_code == 0, neither.stderr
    assert (tmp_path / "checkpoints" / "uuid-a" / "metadata.json").read_text() == '{"total_batches": 20}'
    assert neither.stdout.strip().endswith(f"to {tmp_path / 'checkpoints' / 'uuid-a'}")
    both = run("checkpoint", "download", "uuid-a", str(tmp_path / "p"), "-o", str(tmp_path / "q"))
    assert both.exit_code == 2 and not (tmp_path / "p").exists() and not (tmp_path / "q").exists()


def test_checkpoint_export_gives_the_users_modes_not_the_checkpoints(filled, tmp_path):
    os.chmod(os.path.join(filled["paths"][0], "metadata.json"), 0o400)
    os.chmod(os.path.join(filled["paths"][0], "code"), 0o700)
    old = os.umask(0o022)
    try:
        assert run("checkpoint", "export", "uuid-a", str(tmp_path / "e")).exit_code == 0
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "e" / "metadata.json").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "e" / "code").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "e").st_mode & 0o777 == 0o755


def test_create_accepts_determineds_follow_flag(tmp_path, monkeypatch):
    import determined_lite.experiment as experiment

    calls = []

    def fake_create(config_path, context_dir, overrides, detach, test):
        calls.append(detach)
        return 0

    monkeypatch.setattr(experiment, "create_experiment", fake_create, raising=False)
    config = tmp_path / "exp.yaml"
    config.write_text("name: x\n")
    assert run("experiment", "create", str(config), str(tmp_path), "-f").exit_code == 0
    assert run("experiment", "create", str(config), str(tmp_path), "--follow-first-trial").exit_code == 0
    both = run("experiment", "create", str(config), str(tmp_path), "-f", "--detach")
    assert both.exit_code == 2 and "give one" in both.stderr
    assert calls == [False, False]
