"""The store is composed, not inherited: one ``Database`` and the repositories over it; SQL and
sqlite3 stay inside ``determined_lite/store/`` (another engine would be another ``Database``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from determined_lite.store import Store

PACKAGE = Path(__file__).resolve().parents[2] / "determined_lite"
SQL = re.compile(r"^\s*(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE|PRAGMA)\b", re.IGNORECASE)


def test_store_is_a_database_and_its_repositories(tmp_path):
    assert Store.__bases__ == (object,)
    store = Store(str(tmp_path / "det-lite.db"))
    repositories = ("experiments", "trials", "metrics", "checkpoints", "models", "requests", "logs")
    assert all(getattr(store, name).db is store.db for name in repositories)
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = store.trials.create(exp, 1, {"lr": 0.5}, 7)
    store.metrics.add_validation(trial, 4, {"loss": 0.25})
    store.checkpoints.add(trial, "u1", "/ckpt/u1", 4, {"loss": 0.25})
    store.models.create("m")
    store.models.add_version("m", "u1")
    assert store.checkpoints.registered() == {"u1": "model 'm' version 1"}
    assert store.trials.get(trial)["latest_checkpoint"] == "u1"
    assert store.metrics.validation(trial) == [{"total_batches": 4, "metrics": {"loss": 0.25}}]


def test_sql_stays_in_the_store_package():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "store":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if "sqlite3" in names:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: imports sqlite3")
    assert found == []
