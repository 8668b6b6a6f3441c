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
    exp = writer.experiments.create({"name": "x"}, None, None)
    trial = writer.trials.create(exp, 1, {"lr": 0.1}, 0)
    writer.metrics.add_validation(trial, 4, {"val_loss": 0.5})
    reader = Store(path, read_only=True)
    assert reader.experiments.get(exp)["name"] == "x"
    assert reader.metrics.validation(trial) == [{"total_batches": 4, "metrics": {"val_loss": 0.5}}]
    assert reader.metrics.names([trial]) == {"training": [], "validation": ["val_loss"]}
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.experiments.set_state(exp, "PAUSED")
    writer.metrics.add_validation(trial, 8, {"val_loss": 0.25})  # a writer goes on meanwhile (WAL)
    assert [m["total_batches"] for m in reader.metrics.validation(trial)] == [4, 8]


def test_creates_nothing_and_needs_the_current_schema(tmp_path):
    missing = str(tmp_path / "nothing" / "det-lite.db")
    with pytest.raises(StoreError, match="cannot open"):
        Store(missing, read_only=True)
    assert not os.path.exists(os.path.dirname(missing))
    old = str(tmp_path / "old.db")
    sqlite3.connect(old).execute("PRAGMA user_version = 1").connection.close()
    with pytest.raises(StoreError, match="needs an upgrade"):
        Store(old, read_only=True)
