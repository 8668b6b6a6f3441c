"""Store(read_only=True): reads an existing store, writes nothing (SQLite refuses), creates
nothing, and refuses a store that needs an upgrade (it cannot migrate it)."""

from __future__ import annotations

import os
import sqlite3

import pytest

from determined_lite.store import Store, StoreError


def test_reads_and_refuses_writes(tmp_path):
    path = str(tmp_path / "det-lite.db")
    writer = Store(path)
    exp = writer.create_experiment({"name": "x"}, None, None)
    trial = writer.create_trial(exp, 1, {"lr": 0.1}, 0)
    writer.add_validation_metrics(trial, 4, {"val_loss": 0.5})
    reader = Store(path, read_only=True)
    assert reader.get_experiment(exp)["name"] == "x"
    assert reader.validation_metrics(trial) == [{"total_batches": 4, "metrics": {"val_loss": 0.5}}]
    assert reader.metric_names([trial]) == {"training": [], "validation": ["val_loss"]}
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.set_experiment_state(exp, "PAUSED")
    writer.add_validation_metrics(trial, 8, {"val_loss": 0.25})  # a writer goes on meanwhile (WAL)
    assert [m["total_batches"] for m in reader.validation_metrics(trial)] == [4, 8]


def test_creates_nothing_and_needs_the_current_schema(tmp_path):
    missing = str(tmp_path / "nothing" / "det-lite.db")
    with pytest.raises(StoreError, match="cannot open"):
        Store(missing, read_only=True)
    assert not os.path.exists(os.path.dirname(missing))
    old = str(tmp_path / "old.db")
    sqlite3.connect(old).execute("PRAGMA user_version = 1").connection.close()
    with pytest.raises(StoreError, match="needs an upgrade"):
        Store(old, read_only=True)
