"""Metric reduction: built-in Reducers, custom MetricReducers, function reducers, training metrics.

Every expected value is computed by hand from the records (record i of the fixture data is the
number i), never by the code under test. The running example: a validation set of 5 records
[0, 1, 2, 3, 4] in batches of 2 → batches [0, 1], [2, 3], [4]; the metric is mean(id²) per
batch → 0.5, 6.5, 16.0 with batch lengths 2, 2, 1:
  per-record mean  (0+1+4+9+16)/5          = 6.0     (Reducer.AVG, sample-weighted)
  mean of batch means (0.5+6.5+16)/3       = 23/3    (Reducer.BATCH_AVG)
  SUM of batch values                       = 23.0, MIN = 0.5, MAX = 16.0
"""

from __future__ import annotations

import json
import math
import pickle
from fractions import Fraction
from typing import Any, Dict, List

import numpy as np
import pytest
import torch

from determined_lite._errors import InvalidExperimentException, ReducerTypeError
from determined_lite.pytorch import MetricReducer, Reducer
from determined_lite.pytorch._reducer import (
    REDUCER_KINDS,
    check_evaluation_reducer,
    plain_metrics,
    reducer_kind,
    to_json_metric,
    validation_cross_slot,
    validation_partial,
    wrap_reducer,
)
from determined_lite.pytorch._training_metrics import training_cross_slot, training_partial
from tests.fixtures import linear
from tests.fixtures.reduce_trials import EventReducer, IdBase, IdTrial, ThreadGroup, batch_ids, fit

PER_RECORD_MEAN = 6.0
MEAN_OF_BATCH_MEANS = 23 / 3
BATCH_VALUES = [0.5, 6.5, 16.0]
BATCH_LENGTHS = [2, 2, 1]


def _val(result: Any) -> List[Dict[str, Any]]:
    return [v["metrics"] for v in result.validation_metrics]


def _train(result: Any) -> List[Dict[str, Any]]:
    return [t["metrics"] for t in result.training_metrics]


def _reducing(reducer: Any) -> type:
    """IdTrial whose evaluation_reducer() returns ``reducer``."""

    class T(IdTrial):
        def evaluation_reducer(self) -> Any:
            return reducer

    return T


# --- built-in reducers, one slot --------------------------------------------------------------


def test_avg_is_sample_weighted_on_uneven_last_batch() -> None:
    assert PER_RECORD_MEAN != MEAN_OF_BATCH_MEANS
    _, result = fit(IdTrial, {"val_size": 5, "val_batch_size": 2})
    assert [v["total_batches"] for v in result.validation_metrics] == [3, 6]
    for metrics in _val(result):
        assert metrics == {"x2_mean": PER_RECORD_MEAN}
        assert metrics["x2_mean"] != MEAN_OF_BATCH_MEANS


@pytest.mark.parametrize(
    "reducer, expected",
    [
        (Reducer.AVG, 6.0),
        (Reducer.BATCH_AVG, 23 / 3),
        (Reducer.SUM, 23.0),
        (Reducer.MIN, 0.5),
        (Reducer.MAX, 16.0),
    ],
)
def test_each_builtin_reducer_in_a_trial(reducer: Reducer, expected: float) -> None:
    _, result = fit(_reducing(reducer), {"val_size": 5, "val_batch_size": 2})
    assert _val(result) == [{"x2_mean": expected}] * 2


def test_unit_partial_matches_hand_values() -> None:
    got = {
        kind: validation_cross_slot(
            [validation_partial([{"m": v} for v in BATCH_VALUES], BATCH_LENGTHS, kind)]
        )
        for kind in Reducer
    }
    assert got == {
        Reducer.AVG: {"m": 6.0},
        Reducer.BATCH_AVG: {"m": 23 / 3},
        Reducer.SUM: {"m": 23.0},
        Reducer.MIN: {"m": 0.5},
        Reducer.MAX: {"m": 16.0},
    }


def test_the_reducer_kind_table_covers_every_reducer_and_nothing_else() -> None:
    assert set(REDUCER_KINDS) == set(Reducer)
    for kind in Reducer:
        assert reducer_kind(kind) is REDUCER_KINDS[kind]


def test_an_unknown_reducer_kind_is_an_error_never_min(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ReducerTypeError, match="unknown reducer kind 'median'"):
        reducer_kind("median")  # type: ignore[arg-type]
    # A member the table lacks (a kind added to Reducer but not to the table) fails everywhere
    # it is used: when evaluation_reducer() is checked, and in both reduction steps.
    monkeypatch.delitem(REDUCER_KINDS, Reducer.MAX)
    with pytest.raises(ReducerTypeError, match="unknown reducer kind"):
        check_evaluation_reducer({"m": Reducer.MAX})
    with pytest.raises(ReducerTypeError, match="unknown reducer kind"):
        validation_partial([{"m": v} for v in BATCH_VALUES], BATCH_LENGTHS, Reducer.MAX)
    partial = {"m": (Reducer.MAX, np.float64(1.0), None)}
    with pytest.raises(ReducerTypeError, match="unknown reducer kind"):
        validation_cross_slot([partial, partial])


class _PerMetric(IdTrial):
    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        (x,) = batch
        v = (x**2).mean()
        return {"a": v, "b": v, "c": v, "d": v, "e": v}

    def evaluation_reducer(self) -> Any:
        return {
            "a": Reducer.AVG,
            "b": Reducer.SUM,
            "c": Reducer.MIN,
            "d": Reducer.MAX,
            "e": Reducer.BATCH_AVG,
        }


def test_per_metric_reducer_dict() -> None:
    _, result = fit(_PerMetric, {"val_size": 5, "val_batch_size": 2})
    assert _val(result) == [{"a": 6.0, "b": 23.0, "c": 0.5, "d": 16.0, "e": 23 / 3}] * 2


def test_reducer_dict_missing_a_metric_names_it() -> None:
    class T(_PerMetric):
        def evaluation_reducer(self) -> Any:
            return {"a": Reducer.AVG, "b": Reducer.SUM, "c": Reducer.MIN, "e": Reducer.MAX}

    with pytest.raises(InvalidExperimentException, match=r"without a reducer for metric .d."):
        fit(T, {"val_size": 5, "val_batch_size": 2})


def test_get_batch_length_override_changes_the_weights() -> None:
    class T(_PerMetric):
        def get_batch_length(self, batch: Any) -> int:
            return len(batch[0]) ** 2  # weights 4, 4, 1

    _, result = fit(T, {"val_size": 5, "val_batch_size": 2})
    # AVG: (0.5·4 + 6.5·4 + 16·1) / 9 = 44/9; the other reducers ignore lengths.
    assert 44 / 9 not in (6.0, 23 / 3)
    assert _val(result) == [{"a": 44 / 9, "b": 23.0, "c": 0.5, "d": 16.0, "e": 23 / 3}] * 2


def test_default_batch_length_counts_records_of_a_dict_batch() -> None:
    """The default get_batch_length finds the first tensor inside a dict batch."""
    batches = [{"x": torch.zeros(3), "tag": "ignored"}, {"x": torch.zeros(1), "tag": "x"}]
    trial = IdTrial.__new__(IdTrial)
    assert [trial.get_batch_length(b) for b in batches] == [3, 1]


# --- array-valued metrics ---------------------------------------------------------------------


class _Vector(IdTrial):
    """Per batch: [mean id, max id] (tensor), and a 2×2 numpy array [[min, max], [n, sum]]."""

    kind = Reducer.AVG

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        (x,) = batch
        arr = np.array([[x.min().item(), x.max().item()], [float(len(x)), x.sum().item()]])
        return {"vec": torch.stack([x.mean(), x.max()]), "mat": arr}

    def evaluation_reducer(self) -> Any:
        return self.kind


@pytest.mark.parametrize(
    "kind, vec, mat",
    [
        # batches [0,1] [2,3] [4]: vec = [0.5,1] [2.5,3] [4,4];
        # mat = [[0,1],[2,1]] [[2,3],[2,5]] [[4,4],[1,4]]
        (Reducer.AVG, [2.0, 12 / 5], [[8 / 5, 12 / 5], [9 / 5, 16 / 5]]),
        (Reducer.BATCH_AVG, [7 / 3, 8 / 3], [[2.0, 8 / 3], [5 / 3, 10 / 3]]),
        (Reducer.SUM, [7.0, 8.0], [[6.0, 8.0], [5.0, 10.0]]),
        (Reducer.MIN, [0.5, 1.0], [[0.0, 1.0], [1.0, 1.0]]),
        (Reducer.MAX, [4.0, 4.0], [[4.0, 4.0], [2.0, 5.0]]),
    ],
)
def test_array_metrics_reduce_elementwise(kind: Reducer, vec: List[float], mat: List[List[float]]) -> None:
    T = type("T", (_Vector,), {"kind": kind})
    _, result = fit(T, {"val_size": 5, "val_batch_size": 2})
    assert _val(result) == [{"vec": vec, "mat": mat}] * 2


# --- several slots: partials merged -----------------------------------------------------------

# Seven batches of uneven lengths with dyadic values (every sum below is exact in float64).
_VALUES = [1.5, -0.25, 4.0, 2.75, -3.5, 0.125, 8.0]
_LENGTHS = [3, 3, 2, 3, 1, 3, 2]
_BATCHES = [{"s": v, "v": np.array([v, -2 * v, 1.0])} for v in _VALUES]


def _hand(kind: Reducer) -> Dict[str, Any]:
    def one(vals: List[float]) -> float:
        fr = [Fraction(v) for v in vals]
        if kind is Reducer.AVG:
            return float(sum(f * n for f, n in zip(fr, _LENGTHS)) / sum(_LENGTHS))
        if kind is Reducer.BATCH_AVG:
            return float(sum(fr) / len(fr))
        if kind is Reducer.SUM:
            return float(sum(fr))
        return float(min(fr) if kind is Reducer.MIN else max(fr))

    columns = [[v, -2 * v, 1.0] for v in _VALUES]
    return {"s": one(_VALUES), "v": [one([c[i] for c in columns]) for i in range(3)]}


@pytest.mark.parametrize("kind", list(Reducer))
@pytest.mark.parametrize(
    "shards",
    [[(0, 4), (4, 7)], [(0, 1), (1, 5), (5, 7)], [(0, 3), (3, 3), (3, 7)]],
    ids=["2-ranks-4+3", "3-ranks-1+4+2", "3-ranks-3+0+4"],
)
def test_cross_slot_equals_single_slot(kind: Reducer, shards: List[Any]) -> None:
    single = validation_cross_slot([validation_partial(_BATCHES, _LENGTHS, kind)])
    partials = [validation_partial(_BATCHES[a:b], _LENGTHS[a:b], kind) for a, b in shards]
    # Partials travel between workers pickled.
    partials = [pickle.loads(pickle.dumps(p)) for p in partials]
    merged = validation_cross_slot(partials)
    assert plain_metrics(merged) == plain_metrics(single) == _hand(kind)


def test_hand_values_of_the_multi_slot_data() -> None:
    """Guard the fixture: AVG, BATCH_AVG, SUM differ, so the test above distinguishes them."""
    assert _hand(Reducer.AVG)["s"] == 32.875 / 17
    assert _hand(Reducer.BATCH_AVG)["s"] == 12.625 / 7
    assert _hand(Reducer.SUM)["s"] == 12.625
    assert (_hand(Reducer.MIN)["s"], _hand(Reducer.MAX)["s"]) == (-3.5, 8.0)


def test_training_cross_slot_averages_each_batch_over_ranks_then_the_batches() -> None:
    # Three ranks, two batches each; rank r's batch b holds _VALUES[3b + r] (ranks of a global batch).
    ranks = [[{"loss": v, "vec": [v, 1.0]} for v in (_VALUES[r], _VALUES[3 + r])] for r in range(3)]
    assert sum(_VALUES[0:3]) == 5.25 and sum(_VALUES[3:6]) == -0.625
    partials = [pickle.loads(pickle.dumps(training_partial(chunk))) for chunk in ranks]
    report = training_cross_slot(partials, ranks[0])
    per_batch = [sum(_VALUES[0:3]) / 3, sum(_VALUES[3:6]) / 3]  # 5.25 / 3 and -0.625 / 3
    assert [m["loss"] for m in report.batch_metrics] == per_batch
    assert [m["vec"].tolist() for m in report.batch_metrics] == [[v, 1.0] for v in per_batch]
    assert report.metrics["loss"] == sum(per_batch) / 2
    assert report.metrics["vec"].tolist() == [sum(per_batch) / 2, 1.0]
    # One rank: the chunk itself, and its mean.
    single = training_cross_slot([training_partial(ranks[1])], ranks[1])
    assert [m["loss"] for m in single.batch_metrics] == [_VALUES[1], _VALUES[4]]
    assert single.metrics["loss"] == (_VALUES[1] + _VALUES[4]) / 2


# --- several slots: whole trials on thread ranks ---------------------------------------------


class _AllKinds(IdTrial):
    """Every built-in reducer, a vector metric, a MetricReducer and a function reducer."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.events = context.wrap_reducer(EventReducer(), name="n_updates", for_training=False)
        self.fn_calls: List[Any] = []
        self.ids = context.wrap_reducer(self._ids, name="ids", for_training=False)

    def _ids(self, values: List[Any]) -> Any:
        self.fn_calls.append(values)
        return [i for v in values for i in v]

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        (x,) = batch
        self.events.update(batch_ids(batch))
        self.ids.update(batch_ids(batch))
        v = (x**2).mean()
        return {"avg": v, "bavg": v, "sum": v, "min": v, "max": v, "vec": torch.stack([x.min(), x.max()])}

    def evaluation_reducer(self) -> Any:
        return {
            "avg": Reducer.AVG,
            "bavg": Reducer.BATCH_AVG,
            "sum": Reducer.SUM,
            "min": Reducer.MIN,
            "max": Reducer.MAX,
            "vec": Reducer.AVG,
        }


# val 7 records in batches of 3 → [0,1,2] [3,4,5] [6]; mean id² = 5/3, 50/3, 36; lengths 3, 3, 1.
_SEVEN = {
    "avg": 91 / 7,
    "bavg": (5 / 3 + 50 / 3 + 36) / 3,
    "sum": 5 / 3 + 50 / 3 + 36,
    "min": 5 / 3,
    "max": 36.0,
    "vec": [(0 * 3 + 3 * 3 + 6) / 7, (2 * 3 + 5 * 3 + 6) / 7],
    "n_updates": 3,
    "ids": [0, 1, 2, 3, 4, 5, 6],
}


def _close(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    """Equal up to float summation order (the thirds above are not exact)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        xs, ys = (x, y) if isinstance(x, list) else ([x], [y])
        if len(xs) != len(ys) or not all(
            type(p) is type(q) and math.isclose(p, q, rel_tol=1e-12) for p, q in zip(xs, ys)
        ):
            return False
    return True


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_thread_ranks_report_single_slot_validation_metrics(size: int) -> None:
    hp = {"val_size": 7, "val_batch_size": 3, "global_batch_size": 12, "train_size": 24}

    def rank(r: int, ctx: Any) -> Any:
        trial, result = fit(_AllKinds, hp, distributed=ctx)
        return trial, result

    out = ThreadGroup(size).run(rank)
    for trial, result in out:
        assert len(result.validation_metrics) == 2
        for metrics in _val(result):
            assert _close(metrics, _SEVEN), metrics
        # One entry per slot, ordered by rank; the 3 batches are split contiguously
        # (4 ranks: one rank has no batch at all).
        per_slot = {1: [3], 2: [2, 1], 3: [1, 1, 1], 4: [1, 1, 1, 0]}[size]
        assert trial.events.cross_args == [per_slot, per_slot]
        # The function sees every update, in record order, whatever the rank count.
        assert trial.fn_calls == [[[0, 1, 2], [3, 4, 5], [6]]] * 2
    # Every rank reports the same numbers.
    assert all(_val(res) == _val(out[0][1]) for _, res in out)


def test_thread_ranks_training_metrics_average_over_all_ranks() -> None:
    """8 records, global batch 2: every rank reports the single-slot chunk means of the loss."""

    def rank(r: int, ctx: Any) -> Any:
        return fit(IdTrial, {"val_size": 5}, distributed=ctx)[1]

    single = fit(IdTrial, {"val_size": 5})[1]
    # Single slot batches [0,1] [2,3] [4,5] | [6,7] [0,1] [2,3]: loss = mean id per batch.
    assert _train(single) == [{"loss": 2.5}, {"loss": (6.5 + 0.5 + 2.5) / 3}]
    for res in ThreadGroup(2).run(rank):
        assert _close(_train(res)[0], {"loss": 2.5}) and _close(_train(res)[1], {"loss": 9.5 / 3})
        assert _val(res) == [{"x2_mean": 6.0}] * 2


# --- custom MetricReducer ---------------------------------------------------------------------


class _Counting(IdTrial):
    """Three EventReducers (both workloads / training only / validation only) updated everywhere."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.both = EventReducer()
        assert context.wrap_reducer(self.both, name="both") is self.both
        self.train_only = context.wrap_reducer(EventReducer(), name="train_only", for_validation=False)
        self.val_only = context.experimental.wrap_reducer(EventReducer(), name="val_only", for_training=False)
        self.all = [self.both, self.train_only, self.val_only]

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        for r in self.all:
            r.update(batch_ids(batch))
        return super().train_batch(batch, epoch_idx, batch_idx)

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        for r in self.all:
            r.update(batch_ids(batch))
        return super().evaluate_batch(batch)


def _workloads(events: List[Any]) -> List[List[Any]]:
    """For every per_slot_reduce(), the update() values since the latest reset()."""
    out, since_reset = [], []
    for e in events:
        if e == "reset":
            since_reset = []
        elif e == "per_slot":
            out.append(list(since_reset))
        elif isinstance(e, tuple):
            since_reset.append(e[1])
    return out


_HP7 = {"val_size": 7, "val_batch_size": 3}
_VAL7 = [[0, 1, 2], [3, 4, 5], [6]]


def test_metric_reducer_reset_before_every_chunk_and_validation() -> None:
    # Reports at 2 and 4, validations at 3 and 6 → training chunks of 2, 1, 1, 2 batches.
    trial, result = fit(_Counting, _HP7, max_length=6, validation_period=3, reporting_period=2)
    assert _train(result) == [
        {"loss": 1.5, "both": 2, "train_only": 2},
        {"loss": 4.5, "both": 1, "train_only": 1},
        {"loss": 6.5, "both": 1, "train_only": 1},
        {"loss": 1.5, "both": 2, "train_only": 2},
    ]
    assert [t["total_batches"] for t in result.training_metrics] == [2, 3, 4, 6]
    assert _val(result) == [{"x2_mean": 13.0, "both": 3, "val_only": 3}] * 2

    # Training batches: [0,1] [2,3] [4,5] [6,7] [0,1] [2,3] (8 records, batch 2, in order).
    chunks = [[[0, 1], [2, 3]], [[4, 5]], [[6, 7]], [[0, 1], [2, 3]]]
    assert _workloads(trial.both.events) == [chunks[0], chunks[1], _VAL7, chunks[2], chunks[3], _VAL7]
    assert _workloads(trial.train_only.events) == chunks
    assert _workloads(trial.val_only.events) == [_VAL7, _VAL7]
    # Single slot: cross_slot_reduce gets a list with exactly one entry, per_slot_reduce's value.
    assert trial.both.cross_args == [[2], [1], [3], [1], [2], [3]]
    assert trial.train_only.cross_args == [[2], [1], [1], [2]]
    assert trial.val_only.cross_args == [[3], [3]]


def test_metric_reducer_not_reset_mid_chunk() -> None:
    """The first reset comes before the first update; per chunk there is exactly one per_slot."""
    trial, _ = fit(_Counting, _HP7, max_length=6, validation_period=None, reporting_period=3)
    events = trial.train_only.events
    assert events[0] == "reset"
    assert events.count("per_slot") == 2
    assert _workloads(events) == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [0, 1], [2, 3]]]


def test_metric_reducer_with_name_none_returns_several_metrics() -> None:
    class Stats(EventReducer):
        def cross_slot_reduce(self, per_slot_metrics: List[Any]) -> Any:
            return {"calls": sum(per_slot_metrics), "slots": len(per_slot_metrics)}

    class T(IdTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.stats = context.wrap_reducer(Stats(), name=None, for_training=False)

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            self.stats.update(None)
            return super().evaluate_batch(batch)

    _, result = fit(T, _HP7)
    assert _val(result) == [{"x2_mean": 13.0, "calls": 3, "slots": 1}] * 2
    assert _train(result) == [{"loss": 2.5}, {"loss": 9.5 / 3}]


# --- function reducers ------------------------------------------------------------------------


class _FnTrial(IdTrial):
    """A validation function reducer and a training one, both fed record ids."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.val_calls: List[Any] = []
        self.train_calls: List[Any] = []
        self.v = context.wrap_reducer(self._val_fn, name=None, for_training=False)
        self.t = context.wrap_reducer(self._train_fn, name="train_ids", for_validation=False)

    def _val_fn(self, values: List[Any]) -> Dict[str, Any]:
        self.val_calls.append(values)
        return {"id_sum": sum(i for v in values for i in v), "n_updates": len(values)}

    def _train_fn(self, values: List[Any]) -> Any:
        self.train_calls.append(values)
        return [i for v in values for i in v]

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.t.update(batch_ids(batch))
        return super().train_batch(batch, epoch_idx, batch_idx)

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        self.v.update(batch_ids(batch))
        return super().evaluate_batch(batch)


def test_function_reducer_sees_every_value_once_in_order() -> None:
    trial, result = fit(_FnTrial, _HP7)
    assert trial.val_calls == [_VAL7, _VAL7]
    assert _val(result) == [{"x2_mean": 13.0, "id_sum": 21, "n_updates": 3}] * 2
    assert trial.train_calls == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [0, 1], [2, 3]]]
    assert _train(result) == [
        {"loss": 2.5, "train_ids": [0, 1, 2, 3, 4, 5]},
        {"loss": 9.5 / 3, "train_ids": [6, 7, 0, 1, 2, 3]},
    ]


def test_function_reducer_for_both_workloads_does_not_mix_them() -> None:
    class T(IdTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.calls: List[Any] = []
            self.r = context.wrap_reducer(self._fn, name="ids")

        def _fn(self, values: List[Any]) -> Any:
            self.calls.append(values)
            return len(values)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            self.r.update(batch_ids(batch))
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            self.r.update(batch_ids(batch))
            return super().evaluate_batch(batch)

    trial, result = fit(T, _HP7, step_zero_validation=True)
    assert trial.calls == [
        _VAL7,  # step-zero validation
        [[0, 1], [2, 3], [4, 5]],
        _VAL7,
        [[6, 7], [0, 1], [2, 3]],
        _VAL7,
    ]
    assert [m["ids"] for m in _train(result)] == [3, 3]
    assert [m["ids"] for m in _val(result)] == [3, 3, 3]


def test_wrap_reducer_unit_function_and_metric_reducer() -> None:
    w = wrap_reducer(lambda values: sum(values), "total", True, False)
    w.reducer.update(1)
    w.reducer.update(2)
    p0 = w.reducer.per_slot_reduce()
    w.reducer.reset()
    w.reducer.update(4)
    p1 = w.reducer.per_slot_reduce()
    assert w.finish([p0, p1], "validation") == {"total": 7}
    assert (w.for_training, w.for_validation) == (True, False)

    r = EventReducer()
    assert wrap_reducer(r, None, True, True).reducer is r


def test_wrap_reducer_argument_errors() -> None:
    with pytest.raises(TypeError, match=r"wrap_reducer\(reducer=\.\.\.\) must be a function"):
        wrap_reducer(42, "x", True, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"wrap_reducer\(name=\.\.\.\) must be a string or None"):
        wrap_reducer(sum, 3, True, True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"for_training=False and for_validation=False"):
        wrap_reducer(sum, "x", False, False)


def test_two_reducers_with_the_same_name_rejected() -> None:
    class T(IdTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.wrap_reducer(sum, name="dup")
            context.wrap_reducer(len, name="dup")

    with pytest.raises(ValueError, match=r"reducer named 'dup' is already registered"):
        fit(T)


# --- name / dict rule and duplicate names -----------------------------------------------------


def _with_reducer(fn: Any, name: Any, metric: str = "x2_mean", training: bool = False) -> type:
    class T(IdTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.r = context.wrap_reducer(fn, name=name, for_training=training, for_validation=not training)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            self.r.update(1)
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            self.r.update(1)
            (x,) = batch
            return {metric: (x**2).mean()}

    return T


def test_named_reducer_returning_a_dict_is_an_error() -> None:
    match = r"reducer 'acc' .*returned a dict anyway \(keys \['a', 'b'\]\).*leave name=None"
    with pytest.raises(ValueError, match=match):
        fit(_with_reducer(lambda v: {"a": 1, "b": 2}, "acc"))


def test_unnamed_reducer_returning_a_non_dict_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"name=None but it did not return a dict \(it returned a float\)"):
        fit(_with_reducer(lambda v: 1.5, None))


def test_reducer_metric_name_clashing_with_evaluate_batch() -> None:
    with pytest.raises(ValueError, match=r"validation metric 'x2_mean' is produced twice.*evaluate_batch"):
        fit(_with_reducer(lambda v: len(v), "x2_mean"))
    with pytest.raises(ValueError, match=r"validation metric 'x2_mean' is produced twice"):
        fit(_with_reducer(lambda v: {"x2_mean": 1, "other": 2}, None))


def test_reducer_metric_name_clashing_with_train_batch() -> None:
    with pytest.raises(ValueError, match=r"training metric 'loss' is produced twice.*train_batch"):
        fit(_with_reducer(lambda v: len(v), "loss", training=True))


# --- training metrics -------------------------------------------------------------------------


class _Constants(IdBase):
    """train_batch at batch b returns known numbers of several types."""

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        b = batch_idx
        return {
            "loss": torch.tensor(float(b * b), dtype=torch.float64),
            "np32": np.float32(b / 4),
            "np64": np.float64(b) - 0.5,
            "py": float(b) + 0.5,
            "int": b,
            "t_int": torch.tensor(b),
            "t32": torch.tensor(b / 8, dtype=torch.float32),
        }

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        (x,) = batch
        return {
            "t0": (x**2).mean(),
            "np32": np.float32(len(x)),
            "py": float(len(x)),
            "int": len(x),
        }


def test_training_chunk_metrics_are_means_over_the_chunk() -> None:
    _, result = fit(_Constants, {"val_size": 5}, max_length=6, validation_period=3, reporting_period=3)
    assert _train(result) == [
        # batches 0, 1, 2
        {"loss": 5 / 3, "np32": 0.25, "np64": 0.5, "py": 1.5, "int": 1.0, "t_int": 1.0, "t32": 0.125},
        # batches 3, 4, 5 (only this chunk: not cumulative 55/6, not the last batch 25)
        {"loss": 50 / 3, "np32": 1.0, "np64": 3.5, "py": 4.5, "int": 4.0, "t_int": 4.0, "t32": 0.5},
    ]
    for metrics in _train(result) + _val(result):
        for name, value in metrics.items():
            assert type(value) is float, (name, value)
    assert _val(result) == [{"t0": 6.0, "np32": 1.8, "py": 1.8, "int": 1.8}] * 2


def test_training_chunks_follow_validations_and_reports() -> None:
    # Reports at 2, 4, 6 and validation at 3 → chunks [0,1] [2] [3] [4,5] of loss b².
    _, result = fit(_Constants, {"val_size": 5}, max_length=6, validation_period=3, reporting_period=2)
    assert [(t["total_batches"], t["metrics"]["loss"]) for t in result.training_metrics] == [
        (2, 0.5),
        (3, 4.0),
        (4, 9.0),
        (6, 20.5),
    ]


def test_bare_tensor_loss_is_reported_as_loss() -> None:
    _, result = fit(IdTrial, {"val_size": 5})
    assert _train(result) == [{"loss": 2.5}, {"loss": 9.5 / 3}]
    assert type(_train(result)[0]["loss"]) is float


def test_linear_fixture_loss_is_the_chunk_mean() -> None:
    """w0=0, lr=0.01, x=1..8, y=2x, batch 2: loss_i = (w_i-2)² · mean(x²), w_i before batch i."""
    hp = {"lr": 0.01, "global_batch_size": 2, "dataset_size": 8, "val_size": 5}
    with_batches = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [1.0, 2.0], [3.0, 4.0]]
    ws = [0.0] + linear.expected_weights(0.0, 0.01, with_batches)
    losses = [(ws[i] - 2) ** 2 * sum(x * x for x in b) / len(b) for i, b in enumerate(with_batches)]
    # By hand: batch 1 at w=0: 4·(1+4)/2 = 10; w=0.1: 3.61·25/2 = 45.125; w=0.575: 2.030625·30.5.
    assert losses[0] == 10.0
    assert math.isclose(losses[1], 45.125, rel_tol=1e-12)
    assert math.isclose(losses[2], 61.9340625, rel_tol=1e-12)
    _, result = fit(linear.LinearTrial, hp, max_length=6, validation_period=3, reporting_period=3)
    got = [m["loss"] for m in _train(result)]
    assert math.isclose(got[0], 39.0196875, rel_tol=1e-12)
    assert math.isclose(got[0], sum(losses[:3]) / 3, rel_tol=1e-12)
    assert math.isclose(got[1], sum(losses[3:]) / 3, rel_tol=1e-12)
    # "w" is recorded after each step: mean of the weights after batches 1..3.
    assert math.isclose(_train(result)[0]["w"], sum(ws[1:4]) / 3, rel_tol=1e-12)


def test_metrics_are_json_serializable() -> None:
    class T(_Vector):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.r = context.wrap_reducer(lambda v: {"np": np.arange(3), "t": torch.tensor(2.5)}, name=None)

    _, result = fit(T, {"val_size": 5, "val_batch_size": 2})
    for rows in (result.training_metrics, result.validation_metrics):
        text = json.dumps(rows, allow_nan=False)
        assert json.loads(text) == rows
    assert _val(result)[0]["np"] == [0, 1, 2] and _val(result)[0]["t"] == 2.5
    assert _train(result)[0]["np"] == [0, 1, 2]


def test_to_json_metric_conversions() -> None:
    assert to_json_metric(torch.tensor(1.5), "m", "validation") == 1.5
    assert to_json_metric(torch.tensor([1, 2]), "m", "validation") == [1, 2]
    assert to_json_metric(np.float32(0.25), "m", "validation") == 0.25
    assert type(to_json_metric(np.float32(0.25), "m", "validation")) is float
    assert type(to_json_metric(np.int64(3), "m", "validation")) is int
    assert to_json_metric({"a": (np.arange(2), torch.tensor(1))}, "m", "training") == {"a": [[0, 1], 1]}
    with pytest.raises(TypeError, match=r"training metric 'bad' is not JSON-serializable"):
        to_json_metric({"a": object()}, "bad", "training")


# --- evaluate_full_dataset --------------------------------------------------------------------


class _Full(IdBase):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.seen: List[Any] = []
        self.ids = context.wrap_reducer(lambda v: sum(v), name="reduced_sum", for_training=False)

    def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
        assert isinstance(data_loader, torch.utils.data.DataLoader)
        assert not torch.is_grad_enabled()
        assert not self.model.training
        batches = [batch_ids(b) for b in data_loader]
        self.seen.append(batches)
        flat = [i for b in batches for i in b]
        for i in flat:
            self.ids.update(i)
        x = torch.tensor(flat, dtype=torch.float64)
        return {
            "mse": (x**2).mean(),  # 0-d tensor
            "np32": np.float32(0.75),
            "np_int": np.int64(len(flat)),
            "arr": np.array([1.5, 2.5]),
            "vec": torch.tensor([min(flat), max(flat)]),
            "py": 3,
        }


def test_evaluate_full_dataset_gets_a_loader_over_the_whole_set() -> None:
    trial, result = fit(_Full, _HP7)
    assert trial.seen == [_VAL7, _VAL7]
    expected = {
        "mse": 13.0,
        "np32": 0.75,
        "np_int": 7,
        "arr": [1.5, 2.5],
        "vec": [0, 6],
        "py": 3,
        "reduced_sum": 21,
    }
    assert _val(result) == [expected] * 2
    m = _val(result)[0]
    assert (type(m["mse"]), type(m["np32"]), type(m["np_int"])) == (float, float, int)
    assert json.loads(json.dumps(result.validation_metrics)) == result.validation_metrics
    assert trial.model.training


def test_evaluate_full_dataset_on_thread_ranks_runs_once_on_the_chief() -> None:
    def rank(r: int, ctx: Any) -> Any:
        return fit(_Full, _HP7, distributed=ctx)

    out = ThreadGroup(2).run(rank)
    assert out[0][0].seen == [_VAL7, _VAL7]
    assert out[1][0].seen == []
    assert _val(out[0][1]) == _val(out[1][1])
    assert _val(out[1][1])[0]["mse"] == 13.0 and _val(out[1][1])[0]["reduced_sum"] == 21


def test_metric_reducer_is_a_metric_reducer() -> None:
    assert issubclass(EventReducer, MetricReducer)
    with pytest.raises(TypeError):
        MetricReducer()  # type: ignore[abstract]
