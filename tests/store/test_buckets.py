"""The down-sampled curves the store keeps as metrics are written (``store/_buckets.py``) equal
a brute-force down-sampling of the rows, through width doublings, re-reports, forgetting rows,
NaN and infinities; a store of schema v3 gets them on upgrade."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from typing import Any, Dict, List, Tuple

from determined_lite.store import Store, _schema
from determined_lite.store._buckets import MAX_BUCKETS, bucket_width


def _brute(store: Store, trial: int, kind: str) -> Dict[Tuple[str, int], List[Any]]:
    """Every stored row decoded, bucketed at the width of the largest batch."""
    rows = store.metrics.training(trial) if kind == "training" else store.metrics.validation(trial)
    width = bucket_width(max((r["total_batches"] for r in rows), default=0))
    out: Dict[Tuple[str, int], List[Any]] = {}
    for row in rows:
        batch = row["total_batches"]
        for name, value in row["metrics"].items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            cell = out.setdefault((name, batch // width), [batch, batch, 0, 0, None, None, None])
            cell[0], cell[1] = min(cell[0], batch), max(cell[1], batch)
            if math.isnan(value):
                cell[3] += 1
            else:
                cell[2] += 1
                cell[4] = value if cell[4] is None else min(cell[4], value)
                cell[5] = value if cell[5] is None else max(cell[5], value)
            if batch == cell[1]:
                cell[6] = None if math.isnan(value) else float(value)
    return out


def _stored(store: Store, trial: int, kind: str) -> Dict[Tuple[str, int], List[Any]]:
    rows = store.db.read(
        lambda conn: conn.execute(
            "SELECT name, bucket, first, last, rows, nans, low, high, last_value FROM metric_buckets"
            " WHERE trial_id = ? AND kind = ?",
            (trial, kind),
        ).fetchall()
    )
    return {(r[0], r[1]): list(r[2:]) for r in rows}


def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.03:
        return float("nan")
    if roll < 0.04:
        return rng.choice([float("inf"), float("-inf")])
    if roll < 0.05:
        return "text"
    return rng.choice([rng.gauss(0, 1), rng.randint(-5, 5)])


def test_maintained_buckets_equal_a_brute_force_down_sampling(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    rng = random.Random(7)
    for seed in range(3):
        trial = store.trials.create(exp, seed, {}, seed)
        batch = 0
        for step in range(1500):
            batch += rng.choice([1, 1, 2, 7, 40])  # widths double a few times (merges)
            report = {"loss": _value(rng), "acc": _value(rng)}
            if rng.random() < 0.1:
                del report["acc"]
            store.metrics.add_training(trial, batch, report)
            if step % 50 == 0:
                store.metrics.add_validation(trial, batch, {"val_loss": _value(rng)})
            if rng.random() < 0.01:  # a re-report of an earlier batch replaces its row
                again = rng.randint(1, batch)
                store.metrics.add_training(trial, again, {"loss": _value(rng), "acc": -100.0})
        assert bucket_width(batch) >= 16 and len(_stored(store, trial, "training")) <= 2 * MAX_BUCKETS
        for kind in ("training", "validation"):
            assert _stored(store, trial, kind) == _brute(store, trial, kind)
        assert bucket_width(batch - 30) == bucket_width(batch) > bucket_width(batch // 3)
        for back in (batch - 30, batch // 3):  # restarts from a checkpoint: same width, then finer
            store.metrics.delete_after(trial, back)
            for kind in ("training", "validation"):
                assert _stored(store, trial, kind) == _brute(store, trial, kind)
            for b in range(back + 1, back + 20):
                store.metrics.add_training(trial, b, {"loss": _value(rng)})
            for kind in ("training", "validation"):
                assert _stored(store, trial, kind) == _brute(store, trial, kind)


def test_reads_keep_nan_out_of_the_bounds_and_end_on_the_exact_last_value(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = store.trials.create(exp, 1, {}, 0)
    for batch, value in ((1, 3.0), (2, float("nan")), (3, -1.0), (8, float("nan")), (9, 2.5)):
        store.metrics.add_training(trial, batch, {"loss": value})
    buckets = store.metrics.buckets([trial], "training", "loss", 4)
    assert [b[:5] for b in buckets] == [(trial, 1, 3, 2, -1.0), (trial, 8, 9, 1, 2.5)]
    only_nan = store.metrics.buckets([trial], "training", "loss", 1, after=8)
    assert only_nan[0][:4] == (trial, 8, 8, 0) and math.isnan(only_nan[0][4])
    assert store.metrics.last([trial], "training", "loss") == {trial: (9, 2.5)}
    store.metrics.add_training(trial, 10, {"loss": float("nan")})  # a bucket of NaN only after it
    assert store.metrics.last([trial], "training", "loss") == {trial: (9, 2.5)}


def _v3_store(path: str) -> None:
    """A store as determined_lite wrote it at schema v3, with metrics (NaN included)."""
    conn = sqlite3.connect(path, isolation_level=None)
    for migration in _schema.MIGRATIONS[:3]:
        migration(conn)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO experiments (state, config, created_at) VALUES ('ACTIVE', '{}', 0)")
    conn.execute(
        "INSERT INTO trials (experiment_id, state, hparams, created_at) VALUES (1, 'ACTIVE', '{}', 0)"
    )
    for batch in range(1, 3001):
        value = float("nan") if batch % 500 == 0 else math.sin(batch)
        conn.execute(
            "INSERT INTO training_metrics (trial_id, total_batches, metrics, created_at) VALUES (1, ?, ?, 0)",
            (batch, json.dumps({"loss": value, "step": batch})),
        )
    conn.execute(
        "INSERT INTO validation_metrics (trial_id, total_batches, metrics, created_at)"
        " VALUES (1, 3000, ?, 0)",
        (json.dumps({"val_loss": 0.5}),),
    )
    conn.close()


def test_a_v3_store_is_upgraded_with_its_buckets_backfilled(tmp_path):
    path = str(tmp_path / "det-lite.db")
    _v3_store(path)
    store = Store(path)
    for kind in ("training", "validation"):
        assert _stored(store, 1, kind) == _brute(store, 1, kind)
    assert len(_stored(store, 1, "training")) == 2 * (3000 // 4 + 1)  # width 4: 3000 // 4 < 1024
    store.metrics.add_training(1, 3001, {"loss": 9.0, "step": 3001})  # the write path carries on
    assert _stored(store, 1, "training") == _brute(store, 1, "training")
    store.close()
    reader = Store(path, read_only=True)
    top = max(b[5] for b in reader.metrics.buckets([1], "training", "loss", 64))
    assert top == 9.0 and reader.metrics.last([1], "validation", "val_loss") == {1: (3000, 0.5)}
