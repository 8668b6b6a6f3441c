"""Curves down-sampled on the server: bounded points per trial, every bucket's minimum and
maximum kept, exact when the data is small."""

from __future__ import annotations

import math
import random

from determined_lite.store import Store
from determined_lite.ui._downsample import DEFAULT_POINTS, MAX_POINTS, bucket_width, curves


def test_bucket_width():
    assert bucket_width(0, 1000) == 1
    assert bucket_width(1000, 1000) == 1
    assert bucket_width(1001, 1000) == 2
    assert bucket_width(10**6, 1000) == 1000
    assert bucket_width(10**6, 10**9) == math.ceil(10**6 / MAX_POINTS)  # points are capped
    assert bucket_width(50, 0) == 50  # at least one bucket


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
    exp = store.create_experiment({"name": "x"}, None, None)
    trials = [store.create_trial(exp, i, {}, 0) for i in range(2)]
    rng = random.Random(0)
    values = {t: [rng.gauss(0, 1) for _ in range(5000)] for t in trials}
    values[trials[0]][1234] = -50.0  # a spike down and one up must survive
    values[trials[1]][4321] = 60.0
    for t in trials:
        for batch, value in enumerate(values[t], start=1):
            store.add_training_metrics(t, batch, {"loss": value, "other": 1})
    store.add_training_metrics(trials[1], 5001, {"loss": float("nan"), "other": 1})  # skipped, not fatal
    width = bucket_width(5001, DEFAULT_POINTS // 10)
    series = curves(store.metric_buckets(trials, "training", "loss", width), trials)
    for one, t in zip(series, trials):
        assert len(one["x"]) <= 2 * (DEFAULT_POINTS // 10) + 2
        assert one["rows"] == 5000
        assert min(one["y"]) == min(values[t]) and max(one["y"]) == max(values[t])
        assert one["x"] == sorted(one["x"])
    assert store.metric_names(trials) == {"training": ["loss", "other"], "validation": []}
    assert store.metric_buckets(trials, "training", "missing", width) == []


def test_every_row_when_the_curve_is_short(tmp_path):
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.create_experiment({"name": "x"}, None, None)
    trial = store.create_trial(exp, 1, {}, 0)
    for batch in (2, 4, 6):
        store.add_validation_metrics(trial, batch, {"val_loss": 1.0 / batch})
    series = curves(store.metric_buckets([trial], "validation", "val_loss", bucket_width(6, 1000)), [trial])
    assert series[0]["x"] == [2, 4, 6] and series[0]["y"] == [0.5, 0.25, 1 / 6]
