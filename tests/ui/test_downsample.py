"""Curves down-sampled on the server: bounded points per trial, every bucket's minimum and
maximum kept, exact when the data is small."""

from __future__ import annotations

import random

from determined_lite.store import Store
from determined_lite.ui._curves import BASE_BUCKETS, CurveCache, default_points
from determined_lite.ui._downsample import curves


def test_one_point_per_single_row_bucket_and_an_empty_series_for_a_silent_trial():
    buckets = [(1, 2, 2, 1, 0.5, 0.5), (1, 4, 4, 1, 0.25, 0.25)]
    assert curves(buckets, [1, 7]) == [
        {"trial_id": 1, "x": [2, 4], "y": [0.5, 0.25], "rows": 2},
        {"trial_id": 7, "x": [], "y": [], "rows": 0},
    ]


def test_two_points_per_bucket_in_the_order_that_continues_the_curve():
    falling = [(1, 0, 9, 10, 8.0, 10.0), (1, 10, 19, 10, 5.0, 7.9)]
    series = curves(falling, [1])[0]
    assert series["x"] == [0, 9, 10, 19]
    assert series["y"] == [8.0, 10.0, 7.9, 5.0]  # after 10.0: the max (7.9) is nearer, so first
    assert series["rows"] == 20


def test_store_buckets_keep_every_minimum_and_maximum(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trials = [store.trials.create(exp, i, {}, 0) for i in range(2)]
    rng = random.Random(0)
    values = {t: [rng.gauss(0, 1) for _ in range(5000)] for t in trials}
    values[trials[0]][1234] = -50.0  # a spike down and one up must survive
    values[trials[1]][4321] = 60.0
    for t in trials:
        for batch, value in enumerate(values[t], start=1):
            store.metrics.add_training(t, batch, {"loss": value, "other": 1})
    store.metrics.add_training(trials[1], 5001, {"loss": float("nan"), "other": 1})  # skipped, not fatal
    rows = [store.trials.get(t) for t in trials]
    width, buckets = CurveCache(store).buckets(rows, "training", "loss", 100)
    assert width == 64  # the power of two that makes 5001 batches about 100 buckets
    series = curves(buckets, trials)
    for one, t in zip(series, trials):
        assert len(one["x"]) <= 2 * (5001 // 64 + 1)
        assert one["rows"] == 5000
        assert min(one["y"]) == min(values[t]) and max(one["y"]) == max(values[t])
        assert one["x"] == sorted(one["x"])
    assert store.metrics.names(trials) == {"training": ["loss", "other"], "validation": []}
    assert store.metrics.buckets(trials, "training", "missing", width) == []


def test_every_row_when_the_curve_is_short(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = store.trials.create(exp, 1, {}, 0)
    for batch in (2, 4, 6):
        store.metrics.add_validation(trial, batch, {"val_loss": 1.0 / batch})
    width, buckets = CurveCache(store).buckets([store.trials.get(trial)], "validation", "val_loss", 1000)
    series = curves(buckets, [trial])
    assert width == 1 and series[0]["x"] == [2, 4, 6] and series[0]["y"] == [0.5, 0.25, 1 / 6]


def test_the_cache_reads_only_new_rows_and_starts_over_after_a_restart(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = store.trials.create(exp, 1, {}, 0)
    cache = CurveCache(store)
    scans = []
    real = store.metrics.buckets
    monkeypatch.setattr(store.metrics, "buckets", lambda *a: scans.append(a[-1]) or real(*a))

    def report(batches, value):
        for batch in batches:
            store.metrics.add_training(trial, batch, {"loss": value(batch)})
        return curves(cache.buckets([store.trials.get(trial)], "training", "loss", 1000)[1], [trial])[0]

    assert report(range(1, 11), float)["y"] == [float(b) for b in range(1, 11)]
    assert report(range(11, 21), float)["y"] == [float(b) for b in range(1, 21)]
    assert scans == [0, 10]  # the second read started after batch 10
    store.metrics.delete_after(trial, 5)
    store.trials.update(trial, restarts=1)
    assert report(range(6, 9), lambda b: -b)["y"] == [1.0, 2.0, 3.0, 4.0, 5.0, -6.0, -7.0, -8.0]
    assert scans[-1] == 0  # read again from the start


def test_a_long_curve_is_coarsened_exactly(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = store.trials.create(exp, 1, {}, 0)
    cache = CurveCache(store)
    store.metrics.add_training(trial, 1, {"loss": 5.0})
    cache.buckets([store.trials.get(trial)], "training", "loss", 10)
    store.metrics.add_training(trial, 3 * BASE_BUCKETS, {"loss": -5.0})  # the width must grow
    width, buckets = cache.buckets([store.trials.get(trial)], "training", "loss", 10)
    assert [(b[1], b[3], b[4], b[5]) for b in buckets] == [
        (1, 1, 5.0, 5.0),
        (3 * BASE_BUCKETS, 1, -5.0, -5.0),
    ]
    assert width >= 3 * BASE_BUCKETS / 10
    assert default_points(1) == 1000 and default_points(100) == 200 and default_points(10**6) == 100


def test_a_curve_ends_on_its_exact_last_value_and_nan_only_buckets_are_gaps():
    buckets = [(1, 0, 9, 10, 1.0, 5.0), (1, 10, 13, 0, float("nan"), float("nan")), (1, 14, 19, 6, 0.5, 4.0)]
    series = curves(buckets, [1], last={1: (19, 2.0)})[0]
    assert series["x"] == [0, 9, 10, 14, 18, 19]
    assert series["y"] == [1.0, 5.0, None, 0.5, 4.0, 2.0]  # extremes kept, then the last value
    assert series["rows"] == 16
    assert curves(buckets[:1], [1], last={1: (9, 1.0)})[0]["y"] == [5.0, 1.0]  # the minimum comes last
