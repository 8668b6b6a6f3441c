"""The experiment store: round trips, the describe shape, states and requests, schema versions,
and several processes on one file (a reader beside a writer, two writers, a killed writer)."""

import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from determined_lite.store import (
    ExperimentKind,
    NotFoundError,
    Store,
    StoreError,
    _schema,
    det_lite_home,
    process_alive,
    schema_version,
    tensorboard_dir,
)
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = {"name": "digits", "searcher": {"name": "grid", "metric": "loss"}, "hyperparameters": {"lr": 0.1}}


def _strip_times(value):
    """``value`` without ``created_at``/``ended_at`` keys (checked separately)."""
    if isinstance(value, dict):
        return {k: _strip_times(v) for k, v in value.items() if k not in ("created_at", "ended_at")}
    if isinstance(value, list):
        return [_strip_times(v) for v in value]
    return value


def _child(code: str, *args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db" / "det-lite.db"))
    yield s
    s.close()


# --- paths ----------------------------------------------------------------------------------


def test_default_path_follows_det_lite_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DET_LITE_HOME", str(tmp_path / "home"))
    s = Store()
    assert s.path == str(tmp_path / "home" / "det-lite.db")
    assert os.path.isfile(s.path)
    assert det_lite_home() == str(tmp_path / "home")
    assert tensorboard_dir(7) == str(tmp_path / "home" / "tensorboard" / "experiment_7")
    monkeypatch.delenv("DET_LITE_HOME")
    assert det_lite_home() == os.path.join(os.path.expanduser("~"), ".det-lite")


# --- experiments ----------------------------------------------------------------------------


def test_experiment_round_trip(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    assert exp_id == 1
    exp = store.experiments.get(exp_id)
    assert isinstance(exp["created_at"], float)
    assert _strip_times(exp) == {
        "id": 1,
        "name": "digits",
        "kind": "experiment",
        "state": "ACTIVE",
        "config": CONFIG,
        "context_dir": "/ctx",
        "config_path": "/ctx/exp.yaml",
        "pid": None,
        "running": False,
        "requested_action": None,
    }
    assert exp["ended_at"] is None
    second = store.experiments.create({"searcher": {"name": "single"}}, None, None, name="other")
    assert second == 2
    assert [(e["id"], e["name"], e["num_trials"]) for e in store.experiments.list()] == [
        (1, "digits", 0),
        (2, "other", 0),
    ]
    assert [e["id"] for e in store.experiments.list(limit=1)] == [2]
    assert "config" not in store.experiments.list(with_config=False)[0]
    assert store.experiments.count() == 2
    assert store.experiments.get(3) is None


def test_experiment_states_stamp_end_time(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    store.requests.request(exp_id, "pause")
    store.experiments.set_state(exp_id, "PAUSED")
    exp = store.experiments.get(exp_id)
    assert (exp["state"], exp["ended_at"], exp["requested_action"]) == ("PAUSED", None, None)
    store.experiments.set_state(exp_id, "COMPLETED")
    ended = store.experiments.get(exp_id)["ended_at"]
    assert ended >= store.experiments.get(exp_id)["created_at"]
    store.experiments.set_state(exp_id, "ACTIVE")
    assert store.experiments.get(exp_id)["ended_at"] is None
    with pytest.raises(ValueError, match="experiment state must be one of ACTIVE, PAUSED, COMPLETED"):
        store.experiments.set_state(exp_id, "DONE")
    with pytest.raises(NotFoundError, match="experiment 9 not found"):
        store.experiments.set_state(9, "PAUSED")


def test_searcher_state_round_trip(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    assert store.experiments.load_searcher_state(exp_id) is None
    state = {"rungs": [[1, 0.5], [2, float("inf")]], "next": 3, "rng": [1, 2, 3]}
    store.experiments.save_searcher_state(exp_id, state)
    loaded = store.experiments.load_searcher_state(exp_id)
    assert loaded["rungs"][1][1] == math.inf
    assert loaded == state
    with pytest.raises(NotFoundError):
        store.experiments.load_searcher_state(5)


def test_pid_and_liveness(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    store.experiments.set_pid(exp_id, os.getpid())
    assert store.experiments.get(exp_id)["pid"] == os.getpid()
    assert store.experiments.get(exp_id)["running"] is True
    assert store.experiments.process_alive(exp_id)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    store.experiments.set_pid(exp_id, child.pid)
    assert not store.experiments.process_alive(exp_id)
    store.experiments.set_pid(exp_id, None)
    assert store.experiments.get(exp_id)["running"] is False


def test_process_alive_detects_reused_pid():
    assert process_alive(os.getpid())
    assert not process_alive(None)
    assert not process_alive(0)
    if os.path.exists(f"/proc/{os.getpid()}/stat"):
        assert not process_alive(os.getpid(), token="not-my-start-time")


# --- trials, metrics, checkpoints -----------------------------------------------------------


def _fill(store):
    """Two trials with metrics and checkpoints; returns (experiment id, trial ids)."""
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    t1 = store.trials.create(exp_id, 0, {"lr": 0.1}, 11)
    t2 = store.trials.create(exp_id, "req-1", {"lr": 0.01}, 12)
    store.metrics.add_training(t1, 10, {"loss": 0.5})
    store.metrics.add_training(t1, 20, {"loss": 0.25})
    store.metrics.add_validation(t1, 20, {"loss": 0.3, "acc": [1, 2]})
    store.checkpoints.add(t1, "uuid-a", "/ck/uuid-a", 20, {"loss": 0.3})
    store.trials.update(t1, state="COMPLETED", best_validation=0.3, restarts=1)
    store.metrics.add_training(t2, 10, {"loss": 0.75, "nested": {"a": 1}})
    store.checkpoints.add(t2, "uuid-b", "/ck/uuid-b", 10)
    return exp_id, (t1, t2)


def test_describe_experiment_exact_shape(store):
    exp_id, (t1, t2) = _fill(store)
    before = time.time()
    store.trials.add_run(t1, executor="local", host="box", slots=2, devices=["2", "3"])
    store.trials.add_run(t1, executor="local", host="box", slots=2, devices=["0", "1"])  # a restart
    described = store.experiments.describe(exp_id)
    runs = described["trials"][0]["runs"]
    assert before <= runs[0].pop("started_at") <= runs[1].pop("started_at") <= time.time()
    assert described["trials"][0]["ended_at"] >= described["trials"][0]["created_at"]
    assert described["trials"][1]["ended_at"] is None
    assert _strip_times(described) == {
        "id": exp_id,
        "name": "digits",
        "kind": "experiment",
        "state": "ACTIVE",
        "config": CONFIG,
        "context_dir": "/ctx",
        "config_path": "/ctx/exp.yaml",
        "pid": None,
        "running": False,
        "requested_action": None,
        "labels": [],
        "notes": "",
        "trials": [
            {
                "id": t1,
                "state": "COMPLETED",
                "hparams": {"lr": 0.1},
                "seed": 11,
                "total_batches": 20,
                "restarts": 1,
                "training_metrics": [
                    {"total_batches": 10, "metrics": {"loss": 0.5}},
                    {"total_batches": 20, "metrics": {"loss": 0.25}},
                ],
                "validation_metrics": [{"total_batches": 20, "metrics": {"loss": 0.3, "acc": [1, 2]}}],
                "checkpoints": [
                    {"uuid": "uuid-a", "path": "/ck/uuid-a", "total_batches": 20, "metrics": {"loss": 0.3}}
                ],
                "best_validation": 0.3,
                "experiment_id": exp_id,
                "request_id": 0,
                "latest_checkpoint": "uuid-a",
                "started_at": None,  # never launched by a runner (schema v5, issue 29.11)
                "stopped_early": False,
                # Where each run was placed, oldest first (schema v6, issue 23).
                "runs": [
                    {"executor": "local", "host": "box", "slots": 2, "devices": ["2", "3"]},
                    {"executor": "local", "host": "box", "slots": 2, "devices": ["0", "1"]},
                ],
            },
            {
                "id": t2,
                "state": "ACTIVE",
                "hparams": {"lr": 0.01},
                "seed": 12,
                "total_batches": 10,
                "restarts": 0,
                "training_metrics": [{"total_batches": 10, "metrics": {"loss": 0.75, "nested": {"a": 1}}}],
                "validation_metrics": [],
                "checkpoints": [
                    {"uuid": "uuid-b", "path": "/ck/uuid-b", "total_batches": 10, "metrics": None}
                ],
                "best_validation": None,
                "experiment_id": exp_id,
                "request_id": "req-1",
                "latest_checkpoint": "uuid-b",
                "started_at": None,  # never launched by a runner (schema v5, issue 29.11)
                "stopped_early": False,
                "runs": [],
            },
        ],
    }
    assert store.trials.describe(t2) == described["trials"][1]
    assert store.trials.describe(99) is None
    assert store.experiments.describe(99) is None
    # Without metrics: the same, less the two lists that grow with training.
    lean = store.experiments.describe(exp_id, metrics=False)
    for run in lean["trials"][0]["runs"]:
        del run["started_at"]  # popped from described's above
    for trial in described["trials"]:
        del trial["training_metrics"], trial["validation_metrics"]
    assert _strip_times(lean) == _strip_times(described)
    assert store.trials.describe(t2, metrics=False) == lean["trials"][1]


def test_workloads_one_row_per_batch_count(store):
    """A trial's workloads: training, validation and checkpoints of a batch count in one row; by
    default only the batch counts with a validation or a checkpoint, and the latest report."""
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {"lr": 0.1}, 1)
    for n in range(1, 6):
        store.metrics.add_training(trial, 10 * n, {"loss": 1 / n})
    store.metrics.add_validation(trial, 20, {"val": 0.5})
    store.metrics.add_validation(trial, 55, {"val": 0.25})  # between reports
    store.checkpoints.add(trial, "c20", "/c/20", 20)
    store.checkpoints.add(trial, "c20b", "/c/20b", 20)
    store.checkpoints.add(trial, "c5", "/c/5", 5)  # before the first report
    rows, left_out = store.metrics.workloads([trial])
    assert [tuple(r) for r in rows] == [
        (trial, 5, None, None, ["c5"]),
        (trial, 20, {"loss": 0.5}, {"val": 0.5}, ["c20", "c20b"]),
        (trial, 50, {"loss": 0.2}, None, []),  # the latest report
        (trial, 55, None, {"val": 0.25}, []),
    ]
    assert left_out  # reports 10, 30 and 40
    every, left_out = store.metrics.workloads([trial], every=True)
    assert [r.total_batches for r in every] == [5, 10, 20, 30, 40, 50, 55]
    assert [r.training for r in every if r.training] == [{"loss": 1 / n} for n in range(1, 6)]
    assert every[2] == rows[1] and not left_out
    empty = store.trials.create(exp_id, 1, {"lr": 0.2}, 2)
    assert store.metrics.workloads([empty]) == ([], False)
    store.metrics.add_training(empty, 10, {"loss": 1.0})
    assert store.metrics.workloads([empty]) == ([(empty, 10, {"loss": 1.0}, None, [])], False)
    # Several trials in one read: by trial, then batch.
    both, left_out = store.metrics.workloads([empty, trial])
    assert both == [(empty, 10, {"loss": 1.0}, None, []), *rows] and left_out


def test_workloads_are_index_lookups(store):
    """describe's default reads cost what they show: no statement of store/_workloads.py scans
    a metric table (each searches the (trial_id, total_batches) index)."""
    from determined_lite.store import _workloads

    conn = store.db.connection()
    for name in ("_VALIDATION", "_CHECKPOINTS", "_KEY_TRAINING", "_LEFT_OUT", "_EVERY_TRAINING"):
        steps = conn.execute("EXPLAIN QUERY PLAN " + getattr(_workloads, name), (1,))
        plan = " / ".join(row[3] for row in steps)
        assert "SCAN" not in plan, (name, plan)
        assert "USING" in plan and "INDEX" in plan, (name, plan)
    key_plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + _workloads._KEY_TRAINING, (1,))]
    assert any("(trial_id=? AND total_batches=?)" in step for step in key_plan), key_plan


def test_trial_round_trip_and_errors(store):
    exp_id, (t1, t2) = _fill(store)
    trial = store.trials.get(t2)
    assert _strip_times(trial) == {
        "id": t2,
        "experiment_id": exp_id,
        "request_id": "req-1",
        "state": "ACTIVE",
        "hparams": {"lr": 0.01},
        "seed": 12,
        "total_batches": 10,
        "restarts": 0,
        "best_validation": None,
        "latest_checkpoint": "uuid-b",
        "started_at": None,
        "stopped_early": False,
    }
    # Issue 29.11: a trial's own start (kept from its first run) and ASHA's early stop.
    store.trials.update(t2, started_at=100.0)
    store.trials.update(t2, started_at=200.0, stopped_early=True)
    assert (store.trials.get(t2)["started_at"], store.trials.get(t2)["stopped_early"]) == (100.0, True)
    assert [t["id"] for t in store.trials.list(exp_id)] == [t1, t2]
    assert store.trials.get_by_request(exp_id, "req-1")["id"] == t2
    assert store.trials.get_by_request(exp_id, 0)["id"] == t1
    assert store.trials.get_by_request(exp_id, "0") is None  # request ids keep their type
    store.trials.update(t2, state="PAUSED", total_batches=15)
    assert (store.trials.get(t2)["state"], store.trials.get(t2)["total_batches"]) == ("PAUSED", 15)
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['color'\]"):
        store.trials.update(t2, color="red")
    with pytest.raises(ValueError, match="trial state must be one of"):
        store.trials.update(t2, state="RUNNING")
    with pytest.raises(NotFoundError, match="trial 99 not found"):
        store.trials.update(99, state="PAUSED")
    with pytest.raises(NotFoundError, match="trial 99 not found"):
        store.metrics.add_training(99, 1, {"loss": 1.0})
    with pytest.raises(NotFoundError, match="experiment 42 not found"):
        store.trials.create(42, 0, {}, 1)
    with pytest.raises(TypeError, match="hparams must be JSON-serializable"):
        store.trials.create(exp_id, 5, {"f": object()}, 1)


def test_non_finite_metrics_round_trip(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    store.metrics.add_validation(
        trial, 5, {"nan": float("nan"), "inf": math.inf, "ninf": -math.inf, "l": [math.nan]}
    )
    (row,) = store.metrics.validation(trial)
    metrics = row["metrics"]
    assert math.isnan(metrics["nan"]) and math.isnan(metrics["l"][0])
    assert (metrics["inf"], metrics["ninf"]) == (math.inf, -math.inf)
    store.trials.update(trial, best_validation=float("nan"))
    assert store.trials.get(trial)["best_validation"] is None  # SQLite REAL: NaN is NULL
    store.trials.update(trial, best_validation=-math.inf)
    assert store.trials.get(trial)["best_validation"] == -math.inf


def test_numpy_values_are_stored_as_python_numbers(store):
    np = pytest.importorskip("numpy")
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    store.metrics.add_training(trial, 1, {"loss": np.float32(0.5), "v": np.array([1, 2])})
    assert store.metrics.training(trial) == [{"total_batches": 1, "metrics": {"loss": 0.5, "v": [1, 2]}}]


def test_metrics_after_a_resumed_checkpoint_are_replaced(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    for batches, loss in ((10, 1.0), (20, 0.5), (30, 0.25)):
        store.metrics.add_training(trial, batches, {"loss": loss})
    store.metrics.add_validation(trial, 30, {"loss": 0.2})
    assert store.trials.get(trial)["total_batches"] == 30
    store.metrics.delete_after(trial, 20)  # resumed from the checkpoint at batch 20
    assert store.trials.get(trial)["total_batches"] == 20
    assert [m["total_batches"] for m in store.metrics.training(trial)] == [10, 20]
    assert store.metrics.validation(trial) == []
    store.metrics.add_training(trial, 20, {"loss": 0.4})  # re-reported: replaces
    store.metrics.add_training(trial, 30, {"loss": 0.3})
    assert store.metrics.training(trial) == [
        {"total_batches": 10, "metrics": {"loss": 1.0}},
        {"total_batches": 20, "metrics": {"loss": 0.4}},
        {"total_batches": 30, "metrics": {"loss": 0.3}},
    ]
    # A report for fewer batches never lowers the trial's progress.
    store.metrics.add_training(trial, 5, {"loss": 2.0})
    assert store.trials.get(trial)["total_batches"] == 30
    store.metrics.delete_after(trial, 40)  # nothing after 40: progress stays
    assert store.trials.get(trial)["total_batches"] == 30
    assert len(store.metrics.training(trial)) == 4
    with pytest.raises(NotFoundError, match="trial 99 not found"):
        store.metrics.delete_after(99, 0)


def test_checkpoints_latest_and_delete(store):
    exp_id, (t1, t2) = _fill(store)
    store.checkpoints.add(t2, "uuid-c", "/ck/uuid-c", 30, {"loss": 0.1})
    store.checkpoints.add(t2, "uuid-old", "/ck/uuid-old", 5)  # older batch: latest stays uuid-c
    assert store.trials.get(t2)["latest_checkpoint"] == "uuid-c"
    assert [c["uuid"] for c in store.checkpoints.list(trial_id=t2)] == ["uuid-old", "uuid-b", "uuid-c"]
    assert [c["uuid"] for c in store.checkpoints.list(experiment_id=exp_id)] == [
        "uuid-a",
        "uuid-old",
        "uuid-b",
        "uuid-c",
    ]
    assert store.checkpoints.list(experiment_id=exp_id + 1) == []
    found = store.checkpoints.get("uuid-c")
    assert _strip_times(found) == {
        "uuid": "uuid-c",
        "trial_id": t2,
        "experiment_id": exp_id,
        "path": "/ck/uuid-c",
        "total_batches": 30,
        "metrics": {"loss": 0.1},
        "state": "COMPLETED",
    }
    assert store.checkpoints.delete("uuid-c") == "/ck/uuid-c"
    assert store.checkpoints.get("uuid-c") is None
    assert store.trials.get(t2)["latest_checkpoint"] == "uuid-b"
    assert store.checkpoints.delete("uuid-c") is None
    store.checkpoints.delete("uuid-b")
    store.checkpoints.delete("uuid-old")
    assert store.trials.get(t2)["latest_checkpoint"] is None
    with pytest.raises(NotFoundError, match="trial 77 not found"):
        store.checkpoints.add(77, "u", "/p", 1)


# --- logs -----------------------------------------------------------------------------------


def test_logs_order_tail_and_follow_cursor(store):
    exp_id, (t1, t2) = _fill(store)
    store.logs.add(t1, [(0, "a\n"), (1, "b")])
    store.logs.add(None, ["experiment line"], experiment_id=exp_id)
    store.logs.add(t2, ["c", (None, "d")])
    store.logs.add(t2, [])
    everything = store.logs.list(experiment_id=exp_id)
    assert [(e["trial_id"], e["rank"], e["line"]) for e in everything] == [
        (t1, 0, "a"),
        (t1, 1, "b"),
        (None, None, "experiment line"),
        (t2, None, "c"),
        (t2, None, "d"),
    ]
    assert all(e["experiment_id"] == exp_id for e in everything)
    assert [e["line"] for e in store.logs.list(trial_id=t2)] == ["c", "d"]
    assert [e["line"] for e in store.logs.list(experiment_id=exp_id, tail=2)] == ["c", "d"]
    assert [e["line"] for e in store.logs.list(experiment_id=exp_id, limit=2)] == ["a", "b"]
    cursor = everything[2]["id"]
    assert [e["line"] for e in store.logs.list(experiment_id=exp_id, after_id=cursor)] == ["c", "d"]
    assert store.logs.list(experiment_id=exp_id, tail=0) == []
    with pytest.raises(ValueError, match="need experiment_id"):
        store.logs.add(None, ["x"])
    with pytest.raises(NotFoundError, match="trial 50 not found"):
        store.logs.add(50, ["x"])


# --- pause / kill ---------------------------------------------------------------------------


def test_requests_kill_wins_over_pause(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    assert store.requests.pending(exp_id) is None
    assert store.requests.request(exp_id, "pause") == "pause"
    assert store.requests.pending(exp_id) == "pause"
    assert store.requests.request(exp_id, "kill") == "kill"
    assert store.requests.request(exp_id, "pause") == "kill"
    store.requests.clear(exp_id, "pause")  # the pause was handled; the kill that came later stays
    assert store.requests.pending(exp_id) == "kill"
    store.requests.clear(exp_id)
    assert store.requests.pending(exp_id) is None
    assert store.requests.pending(404) is None
    with pytest.raises(ValueError, match="action must be one of pause, kill; got 'stop'"):
        store.requests.request(exp_id, "stop")


def test_apply_action_without_a_live_process_changes_states(store):
    exp_id, (t1, t2) = _fill(store)  # t1 COMPLETED, t2 ACTIVE
    assert store.requests.apply(exp_id, "pause") == "paused"
    assert store.experiments.get(exp_id)["state"] == "PAUSED"
    assert [store.trials.get(t)["state"] for t in (t1, t2)] == ["COMPLETED", "PAUSED"]
    assert store.requests.apply(exp_id, "pause") == "noop"
    assert store.requests.apply(exp_id, "kill") == "canceled"
    exp = store.experiments.get(exp_id)
    assert (exp["state"], exp["requested_action"]) == ("CANCELED", None)
    assert exp["ended_at"] is not None
    assert [store.trials.get(t)["state"] for t in (t1, t2)] == ["COMPLETED", "CANCELED"]
    assert store.trials.get(t2)["ended_at"] is not None
    assert store.requests.apply(exp_id, "kill") == "noop"


def test_apply_action_with_a_live_process_only_requests(store):
    exp_id, (t1, t2) = _fill(store)
    store.experiments.set_pid(exp_id, os.getpid())
    assert store.requests.apply(exp_id, "pause") == "requested"
    assert store.requests.pending(exp_id) == "pause"
    assert store.requests.apply(exp_id, "kill") == "requested"
    assert store.requests.pending(exp_id) == "kill"
    assert store.experiments.get(exp_id)["state"] == "ACTIVE"
    assert store.trials.get(t2)["state"] == "ACTIVE"
    with pytest.raises(NotFoundError, match="experiment 8 not found"):
        store.requests.apply(8, "kill")


def test_delete_experiment_removes_only_its_rows(store):
    exp_id, (t1, t2) = _fill(store)
    store.logs.add(t1, ["x"])
    store.logs.add(None, ["y"], experiment_id=exp_id)
    other_id, (o1,) = _fill_other(store)
    removed = store.experiments.delete(exp_id)
    assert [(c["uuid"], c["path"]) for c in removed] == [("uuid-a", "/ck/uuid-a"), ("uuid-b", "/ck/uuid-b")]
    assert store.experiments.get(exp_id) is None
    assert store.trials.get(t1) is None and store.trials.get(t2) is None
    assert store.logs.list(experiment_id=exp_id) == []
    assert store.checkpoints.list(experiment_id=exp_id) == []
    conn = sqlite3.connect(store.path)
    for table in ("training_metrics", "validation_metrics", "checkpoints", "logs"):
        (count,) = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE trial_id IN (?, ?)", (t1, t2)).fetchone()
        assert count == 0, table
    conn.close()
    assert [e["id"] for e in store.experiments.list()] == [other_id]
    assert store.metrics.training(o1) == [{"total_batches": 3, "metrics": {"loss": 3.0}}]
    assert [e["line"] for e in store.logs.list(experiment_id=other_id)] == ["other"]
    with pytest.raises(NotFoundError):
        store.experiments.delete(exp_id)


def _fill_other(store):
    exp_id = store.experiments.create({"name": "other"}, "/o", "/o/e.yaml")
    trial = store.trials.create(exp_id, 0, {}, 3)
    store.metrics.add_training(trial, 3, {"loss": 3.0})
    store.checkpoints.add(trial, "uuid-o", "/ck/uuid-o", 3)
    store.logs.add(trial, ["other"])
    return exp_id, (trial,)


# --- schema ---------------------------------------------------------------------------------


def test_wal_mode_and_schema_version(store):
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema_version() == len(_schema.MIGRATIONS)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "experiments",
        "trials",
        "training_metrics",
        "validation_metrics",
        "checkpoints",
        "logs",
    } <= tables
    conn.close()


def test_newer_schema_is_refused(tmp_path):
    path = str(tmp_path / "det-lite.db")
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    known = len(_schema.MIGRATIONS)
    message = rf"schema version 99, newer than the {known} this determined_lite understands"
    with pytest.raises(StoreError, match=message):
        Store(path)


def test_forward_migration_keeps_data(tmp_path, monkeypatch):
    path = str(tmp_path / "det-lite.db")
    old = Store(path)
    exp_id = old.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    old.close()

    def later(conn):
        conn.execute("ALTER TABLE experiments ADD COLUMN description TEXT DEFAULT 'none yet'")

    monkeypatch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS + [later])
    new = Store(path)
    assert new.experiments.get(exp_id)["config"] == CONFIG
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(_schema.MIGRATIONS)
    assert conn.execute("SELECT description FROM experiments").fetchall() == [("none yet",)]
    conn.close()
    new.close()


def test_failed_migration_leaves_the_old_version(tmp_path, monkeypatch):
    path = str(tmp_path / "det-lite.db")
    Store(path).close()

    def broken(conn):
        conn.execute("ALTER TABLE experiments ADD COLUMN half_done TEXT")
        raise RuntimeError("migration bug")

    current = len(_schema.MIGRATIONS)
    monkeypatch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS + [broken])
    with pytest.raises(RuntimeError, match="migration bug"):
        Store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == current
    columns = [r[1] for r in conn.execute("PRAGMA table_info(experiments)")]
    assert "half_done" not in columns
    conn.close()


def test_version_1_store_gains_the_experiment_kind(tmp_path, monkeypatch):
    path = str(tmp_path / "det-lite.db")
    monkeypatch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:1])
    Store(path).close()
    monkeypatch.undo()
    conn = sqlite3.connect(path)
    with conn:  # a version-1 row, as a det-lite of that version wrote it
        conn.execute(
            "INSERT INTO experiments (name, state, config, created_at) VALUES ('old', 'COMPLETED', '{}', 0)"
        )
    conn.close()
    exp_id = 1
    new = Store(path)
    assert new.experiments.get(exp_id)["kind"] == ExperimentKind.EXPERIMENT
    local = new.experiments.create({}, None, None, name="MyTrial", kind=ExperimentKind.LOCAL)
    assert new.experiments.get(local)["kind"] == "local"
    assert [e["kind"] for e in new.experiments.list()] == ["experiment", "local"]
    with pytest.raises(ValueError, match="experiment kind must be one of experiment, local"):
        new.experiments.create({}, None, None, kind="cluster")
    new.close()


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "det-lite.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=f"cannot open the det-lite store {path}: file is not a database"):
        Store(str(path))


# --- concurrency ----------------------------------------------------------------------------

_WRITER = """
import sys
from determined_lite.store import Store
store = Store(sys.argv[1])
trial = int(sys.argv[2])
for i in range(1, int(sys.argv[3]) + 1):
    store.metrics.add_training(trial, i, {"loss": 1.0 / i})
    store.logs.add(trial, [(0, f"line {i}")])
print("done", flush=True)
"""

_READER = """
import sys
from determined_lite.store import Store
store = Store(sys.argv[1])
trial, n = int(sys.argv[2]), int(sys.argv[3])
reads = 0
seen = 0
while seen < n:
    described = store.trials.describe(trial)
    batches = [m["total_batches"] for m in described["training_metrics"]]
    # A snapshot: always a prefix 1..k, never shrinking, the trial's progress matching it.
    assert batches == list(range(1, len(batches) + 1)), batches
    assert len(batches) >= seen
    assert described["total_batches"] == len(batches), (described["total_batches"], len(batches))
    seen = len(batches)
    reads += 1
print("reads", reads, "seen", seen, flush=True)
"""


def test_reader_process_sees_consistent_snapshots_while_a_writer_writes(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    n = 150
    reader = _child(_READER, store.path, str(trial), str(n))
    writer = _child(_WRITER, store.path, str(trial), str(n))
    try:
        w_out, w_err = writer.communicate(timeout=budget(120))
        r_out, r_err = reader.communicate(timeout=budget(120))
    finally:
        for child in (reader, writer):
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, r_err
    assert r_out.split()[-1] == str(n)
    assert [m["metrics"]["loss"] for m in store.metrics.training(trial)] == [1.0 / i for i in range(1, n + 1)]
    assert len(store.logs.list(trial_id=trial)) == n


def test_two_writer_processes_and_threads_lose_nothing(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trials = [store.trials.create(exp_id, i, {}, i) for i in range(4)]
    n = 100
    children = [_child(_WRITER, store.path, str(t), str(n)) for t in trials[:2]]

    def thread_writer(trial):
        for i in range(1, n + 1):
            store.metrics.add_training(trial, i, {"loss": 1.0 / i})
            store.logs.add(trial, [(0, f"line {i}")])

    threads = [threading.Thread(target=thread_writer, args=(t,)) for t in trials[2:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for child in children:
        out, err = child.communicate(timeout=budget(120))
        assert child.returncode == 0, err
    for trial in trials:
        assert [m["total_batches"] for m in store.metrics.training(trial)] == list(range(1, n + 1))
        assert [e["line"] for e in store.logs.list(trial_id=trial)] == [f"line {i}" for i in range(1, n + 1)]
    assert len(store.logs.list(experiment_id=exp_id)) == 4 * n


_KILLED = """
import sys, time
from determined_lite.store import Store
store = Store(sys.argv[1])
trial = int(sys.argv[2])
store.logs.add(trial, ["committed"])

def body(conn):
    conn.executemany(
        "INSERT INTO logs (experiment_id, trial_id, rank, line, created_at) VALUES (?, ?, NULL, ?, 0)",
        [(int(sys.argv[3]), trial, f"uncommitted {i}") for i in range(5000)],
    )
    conn.execute("UPDATE trials SET total_batches = 999 WHERE id = ?", (trial,))
    print("in transaction", flush=True)
    time.sleep(600)

store.db.write(body)
"""


def test_writer_killed_mid_transaction_leaves_a_consistent_store(store):
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    trial = store.trials.create(exp_id, 0, {}, 1)
    child = _child(_KILLED, store.path, str(trial), str(exp_id))
    try:
        assert child.stdout.readline().strip() == "in transaction", child.stderr.read()
        # While it holds the write lock, readers still read (WAL) and see only committed rows.
        assert [e["line"] for e in store.logs.list(trial_id=trial)] == ["committed"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=budget(60))
    assert child.returncode == -signal.SIGKILL
    after = Store(store.path, timeout=20)
    assert [e["line"] for e in after.logs.list(trial_id=trial)] == ["committed"]
    assert after.trials.get(trial)["total_batches"] == 0
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    # The lock died with the process: writing works again.
    after.metrics.add_training(trial, 1, {"loss": 1.0})
    after.logs.add(trial, ["after"])
    assert [e["line"] for e in after.logs.list(trial_id=trial)] == ["committed", "after"]
    after.close()


def test_store_works_in_a_forked_child(store):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    exp_id = store.experiments.create(CONFIG, "/ctx", "/ctx/exp.yaml")
    pid = os.fork()
    if pid == 0:  # child: must open its own connection, not reuse the parent's
        try:
            store.logs.add(None, ["from child"], experiment_id=exp_id)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    store.logs.add(None, ["from parent"], experiment_id=exp_id)
    assert [e["line"] for e in store.logs.list(experiment_id=exp_id)] == ["from child", "from parent"]
