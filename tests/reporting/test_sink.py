"""A chief's reports through a pipe (``reporting/_sink.py``) land in the store exactly as the
chief's own writes would: same rows, same order, numpy values as JSON, the best metric followed,
checkpoints registered with retention; and the pause/kill flag file is read back."""

from __future__ import annotations

import json
import math
import os
import threading

import numpy as np
import pytest

from determined_lite.reporting._reporter import TrialReporter
from determined_lite.reporting._retention import RetentionPolicy
from determined_lite.reporting._sink import STOP_FILE_ENV, RemoteReporter, apply_record, remote_stop_requested
from determined_lite.store import Store


def _calls(reporter, ckpt_dir: str) -> None:
    reporter.restart_at(0)
    reporter.own_length(24)  # a script's fit length (no searcher length): kept with the trial
    reporter.training(2, {"loss": np.float64(0.5), "vec": np.array([1.0, 2.0]), "label": "a"})
    reporter.validation(2, {"val_loss": np.float64(0.25), "nan": math.nan})
    reporter.validation(4, {"val_loss": 0.125})
    reporter.checkpoint("c-1", os.path.join(ckpt_dir, "c-1"), 4, {"val_loss": 0.125})
    reporter.training(6, {"loss": 0.0625, "vec": [3.0, 4.0], "label": None})
    reporter.checkpoint("c-2", os.path.join(ckpt_dir, "c-2"), 6, None)


def _store_with_trial(path: str):
    store = Store(path)
    exp = store.experiments.create({"name": "x"}, None, None)
    return store, exp, store.trials.create(exp, 1, {}, 0)


def _reporter(store, exp: int, trial: int) -> TrialReporter:
    retention = RetentionPolicy.from_config({}, "val_loss", True)
    return TrialReporter(store, trial, exp, retention, "val_loss", True)


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in ("id", "created_at", "timestamp")} for r in rows]


def _snapshot(store, trial: int):
    cks = [(c["uuid"], c["total_batches"]) for c in store.checkpoints.list(trial_id=trial)]
    best = store.trials.get(trial)["best_validation"], store.trials.own_length(trial)
    return _strip(store.metrics.training(trial)), _strip(store.metrics.validation(trial)), cks, best


def test_pipe_reports_equal_direct_writes(tmp_path):
    ckpts = tmp_path / "ckpts"
    for uuid in ("c-1", "c-2"):
        (ckpts / uuid).mkdir(parents=True)
    direct_store, exp, trial = _store_with_trial(str(tmp_path / "direct.db"))
    _calls(_reporter(direct_store, exp, trial), str(ckpts))

    for uuid in ("c-1", "c-2"):
        (ckpts / uuid).mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    remote = RemoteReporter(write_fd, str(tmp_path / "stop"))
    _calls(remote, str(ckpts))
    remote._out.close()
    with os.fdopen(read_fd) as f:
        lines = f.read().splitlines()
    assert [line.split('"call": "')[1].split('"')[0] for line in lines] == [
        "restart_at",
        "own_length",
        "training",
        "validation",
        "validation",
        "checkpoint",
        "training",
        "checkpoint",
    ]
    replay_store, exp2, trial2 = _store_with_trial(str(tmp_path / "replay.db"))
    driver = _reporter(replay_store, exp2, trial2)
    for line in lines:
        apply_record(driver, line)

    direct, replayed = _snapshot(direct_store, trial), _snapshot(replay_store, trial2)
    assert replayed[0] == direct[0] and replayed[2] == direct[2] and replayed[3] == direct[3]
    assert replayed[0][0]["metrics"] == {"loss": 0.5, "vec": [1.0, 2.0], "label": "a"}
    assert math.isnan(replayed[1][0]["metrics"]["nan"]) and replayed[1][1] == direct[1][1]
    assert replayed[2] == [("c-1", 4), ("c-2", 6)]  # the best (its val_loss) and the latest
    assert replayed[3] == (0.125, 24)


def test_stop_flag_and_unknown_calls(tmp_path):
    read_fd, write_fd = os.pipe()
    remote = RemoteReporter(write_fd, str(tmp_path / "stop"))
    assert remote.stop_requested() is False
    (tmp_path / "stop").touch()
    assert remote.stop_requested() is True
    remote._out.close()
    os.close(read_fd)
    with pytest.raises(ValueError, match="unknown report"):
        apply_record(object(), '{"call": "__init__", "args": []}')


def _driver(store, exp: int, trial: int, report_fd: int, answer_fd: int) -> threading.Thread:
    """The driver's side: replay each line in order, write each question's answer back."""

    def run() -> None:
        reporter = _reporter(store, exp, trial)
        with os.fdopen(report_fd) as lines, os.fdopen(answer_fd, "w") as answers:
            for line in lines:
                answer = apply_record(reporter, line)
                if answer is not None:
                    answers.write(answer + "\n")
                    answers.flush()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_store_question_is_answered_after_the_reports_before_it(tmp_path):
    """``experiment_best_validation`` on a remote chief: the driver's store answers, counting
    the chief's own validation sent just before the question, and the other trials'."""
    store, exp, other = _store_with_trial(str(tmp_path / "s.db"))
    trial = store.trials.create(exp, 2, {}, 0)
    report_r, report_w = os.pipe()
    answer_r, answer_w = os.pipe()
    driver = _driver(Store(str(tmp_path / "s.db")), exp, trial, report_r, answer_w)
    remote = RemoteReporter(report_w, None, answer_r)
    assert remote.experiment_best_validation() is None
    _reporter(store, exp, other).validation(4, {"val_loss": 0.5})
    assert remote.experiment_best_validation() == 0.5
    remote.validation(4, {"val_loss": np.float64(0.25)})
    assert remote.experiment_best_validation() == 0.25  # its own report, replayed first
    remote.validation(8, {"val_loss": 0.75})
    assert remote.experiment_best_validation() == 0.25
    remote._out.close()
    driver.join(10)
    assert not driver.is_alive() and store.trials.get(trial)["best_validation"] == 0.25
    gone_r, gone_w = os.pipe()
    os.close(gone_w)  # a driver that is gone: EOF, not a hang
    lost = RemoteReporter(os.open(os.devnull, os.O_WRONLY), None, gone_r)
    with pytest.raises(RuntimeError, match="closed the answer pipe"):
        lost.experiment_best_validation()
    assert json.loads(
        apply_record(_reporter(store, exp, trial), '{"call": "experiment_best_validation", "args": []}')
    ) == {"answer": 0.25}


def test_every_rank_reads_the_stop_flag_of_its_node(tmp_path, monkeypatch):
    monkeypatch.delenv(STOP_FILE_ENV, raising=False)
    assert remote_stop_requested() is None  # no remote executor: the rank asks the store
    monkeypatch.setenv(STOP_FILE_ENV, str(tmp_path / "stop"))
    assert remote_stop_requested() is False
    (tmp_path / "stop").touch()
    assert remote_stop_requested() is True
