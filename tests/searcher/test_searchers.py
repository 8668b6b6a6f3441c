"""Searchers driven by a simulated runner: exact grids, seeded random samples, ASHA promotions,
units trained, early exits and exact resume from state_dict()."""

from __future__ import annotations

import collections
import json
import math
import random
from typing import Callable, Dict, List, Optional

import pytest

from determined_lite.searcher import (
    Close,
    Create,
    Shutdown,
    ValidateAfter,
    grid_points,
    make_searcher,
    op_from_dict,
    op_to_dict,
    plan_brackets,
    validate_searcher,
)

MetricFn = Callable[[dict, int, str], float]


class SimRunner:
    """Executes searcher operations like the experiment runner would.

    At most ``concurrency`` trials train at once; a trial holds a slot only while it works on a
    ValidateAfter. Which running trial finishes next is drawn from a seeded RNG. A promoted trial
    resumes: only the additional length counts as trained. ``exits`` maps a request id to the
    reason it stops instead of reporting: a string (on its first piece of work) or
    ``(reason, n)`` (on its n-th piece of work, 0-based: after n reports).
    """

    def __init__(
        self,
        searcher,
        metric_fn: MetricFn,
        concurrency: int = 1,
        seed: int = 0,
        exits: Optional[Dict[str, str]] = None,
    ) -> None:
        self.searcher = searcher
        self.metric_fn = metric_fn
        self.concurrency = concurrency
        self.rng = random.Random(seed)
        self.exits = dict(exits or {})
        self.trials: Dict[str, dict] = {}
        self.ready: collections.deque = collections.deque()
        self.running: List[str] = []
        self.log: List[object] = []
        self.reports: List[tuple] = []  # validations: (request_id, length, metric, ops returned)
        self.groups: List[list] = []  # the ops of initial_operations() and of each event, in order
        self.units = 0
        self.shutdowns = 0

    # ---- executing operations ---------------------------------------------------------------
    def apply(self, ops) -> None:
        for op in ops:
            assert self.shutdowns == 0, f"{op} after Shutdown"
            self.log.append(op)
            if isinstance(op, Create):
                assert op.request_id not in self.trials
                self.trials[op.request_id] = {
                    "hparams": op.hparams,
                    "trained": 0,
                    "work": collections.deque(),
                    "closed": False,
                    "exited": None,
                    "lengths": [],
                }
            elif isinstance(op, ValidateAfter):
                t = self.trials[op.request_id]
                assert not t["closed"] and t["exited"] is None
                # Never asked to retrain: the target is beyond what the trial has trained.
                assert op.length > max([t["trained"]] + list(t["work"]))
                t["work"].append(op.length)
                if op.request_id not in self.running and op.request_id not in self.ready:
                    self.ready.append(op.request_id)
            elif isinstance(op, Close):
                t = self.trials[op.request_id]
                assert not t["closed"] and t["exited"] is None, f"{op.request_id} closed twice"
                assert not t["work"] and op.request_id not in self.running
                t["closed"] = True
            else:
                assert isinstance(op, Shutdown)
                self.shutdowns += 1

    def step(self) -> bool:
        """Finish one piece of work; False when nothing is left."""
        while self.ready and len(self.running) < self.concurrency:
            self.running.append(self.ready.popleft())
        if not self.running:
            return False
        rid = self.running.pop(self.rng.randrange(len(self.running)))
        t = self.trials[rid]
        exit_at = self.exits.get(rid)
        if isinstance(exit_at, str):
            exit_at = (exit_at, 0)
        if exit_at is not None and exit_at[1] == len(t["lengths"]):
            del self.exits[rid]
            t["work"].clear()
            t["exited"] = exit_at[0]
            ops = self.searcher.on_trial_exited_early(rid, t["exited"])
            self.groups.append(ops)
            self.apply(ops)
            return True
        length = t["work"].popleft()
        self.units += length - t["trained"]
        t["trained"] = length
        t["lengths"].append(length)
        metric = self.metric_fn(t["hparams"], length, rid)
        ops = self.searcher.on_validation_completed(rid, metric, length)
        self.reports.append((rid, length, metric, ops))
        self.groups.append(ops)
        self.apply(ops)  # a promotion puts the trial back in the ready queue
        return True

    def run(self, max_steps: Optional[int] = None) -> "SimRunner":
        if not self.log:
            ops = self.searcher.initial_operations()
            self.groups.append(ops)
            self.apply(ops)
        steps = 0
        while (max_steps is None or steps < max_steps) and self.step():
            steps += 1
            assert 0.0 <= self.searcher.progress() <= 1.0
        return self

    def assert_finished(self) -> None:
        assert self.shutdowns == 1
        assert isinstance(self.log[-1], Shutdown)
        assert self.searcher.progress() == 1.0
        for rid, t in self.trials.items():
            assert (t["closed"] or t["exited"]) and not t["work"], rid


def creates(log) -> List[Create]:
    return [op for op in log if isinstance(op, Create)]


def by_creation_index(values: List[float]) -> MetricFn:
    """Metric of trial r<k> is values[k], whatever the length (request ids count up from r0)."""
    return lambda hparams, length, rid: values[int(rid[1:])]


def asha_conf(**overrides) -> dict:
    conf = {
        "name": "adaptive_asha",
        "metric": "loss",
        "smaller_is_better": True,
        "max_length": {"batches": 8},
        "max_trials": 4,
        "max_concurrent_trials": 1,
        "divisor": 2,
        "max_rungs": 3,
        "mode": "aggressive",
    }
    conf.update(overrides)
    return conf


SPACE = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}


# ---- config helpers --------------------------------------------------------------------------
def single(max_length) -> dict:
    return {"name": "single", "metric": "loss", "max_length": max_length}


def test_unit_and_config_errors():
    # The searcher section is checked by the config schema (validate_searcher); its messages.
    assert validate_searcher(single({"batches": 10})).unit == "batches"
    assert validate_searcher(single({"records": 640})).unit == "records"
    assert validate_searcher(single({"epochs": 2})).unit == "epochs"
    expected_length = r"searcher.max_length: expected \{batches\|records\|epochs: positive int\}, got "
    with pytest.raises(ValueError, match=expected_length + r"\{'steps': 3\}"):
        make_searcher(single({"steps": 3}), {}, 0)
    with pytest.raises(ValueError, match=expected_length + r"\{'batches': 0\}"):
        make_searcher(single({"batches": 0}), {}, 0)
    with pytest.raises(ValueError, match=expected_length + r"\{'batches': 1, 'epochs': 1\}"):
        make_searcher(single({"batches": 1, "epochs": 1}), {}, 0)
    with pytest.raises(ValueError, match=r"searcher.name: Determined's 'pbt' searcher is not available"):
        make_searcher({"name": "pbt", "metric": "loss", "max_length": {"batches": 1}}, {}, 0)
    with pytest.raises(ValueError, match=r"searcher.max_trials: the 'random' searcher needs max_trials"):
        make_searcher({"name": "random", "metric": "loss", "max_length": {"batches": 1}}, {}, 0)
    expected_mode = r"searcher.mode: expected 'aggressive', 'standard' or 'conservative', got 'wild'"
    with pytest.raises(ValueError, match=expected_mode):
        make_searcher(asha_conf(mode="wild"), SPACE, 0)
    with pytest.raises(ValueError, match=r"searcher.divisor: expected a value > 1, got 1"):
        make_searcher(asha_conf(divisor=1), SPACE, 0)
    with pytest.raises(ValueError, match=r"searcher.metric"):
        make_searcher({"name": "single", "max_length": {"batches": 1}}, {}, 0)


def test_hyperparameter_errors_name_the_field():
    base = {"name": "random", "metric": "loss", "max_length": {"batches": 1}, "max_trials": 2}
    with pytest.raises(ValueError, match=r"hyperparameters.opt.lr.minval: expected a finite number"):
        make_searcher(base, {"opt": {"lr": {"type": "double", "minval": "a", "maxval": 1}}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.n.minval: expected an integer"):
        make_searcher(base, {"n": {"type": "int", "minval": 1.5, "maxval": 3}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.n: minval \(4\) must not be greater than maxval"):
        make_searcher(base, {"n": {"type": "int", "minval": 4, "maxval": 3}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.act.vals: a categorical hyperparameter needs"):
        make_searcher(base, {"act": {"type": "categorical", "vals": []}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.a.type: unknown type 'float'"):
        make_searcher(base, {"a": {"type": "float", "minval": 0, "maxval": 1}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.lr.count: the grid searcher needs 'count'"):
        grid = {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}  # grid has no max_trials
        make_searcher(grid, {"lr": {"type": "double", "minval": 0, "maxval": 1}}, 0)
    with pytest.raises(ValueError, match=r"hyperparameters.b: expected a hyperparameter definition"):
        make_searcher(base, {"b": 3}, 0)


# ---- single ---------------------------------------------------------------------------------
def test_single_trains_one_trial_to_max_length():
    space = {"lr": {"type": "const", "val": 0.1}, "model": {"width": {"type": "const", "val": 8}}}
    s = make_searcher({"name": "single", "metric": "loss", "max_length": {"epochs": 3}}, space, 5)
    assert s.total_trials == 1 and s.unit == "epochs" and s.metric == "loss"
    assert s.initial_operations() == [
        Create("r0", {"lr": 0.1, "model": {"width": 8}}),
        ValidateAfter("r0", 3),
    ]
    assert s.progress() == 0.0
    assert s.on_validation_completed("r0", 0.5, 1) == []  # a periodic validation: not the target yet
    assert s.on_validation_completed("r0", 0.4, 3) == [Close("r0"), Shutdown()]
    assert s.progress() == 1.0
    with pytest.raises(RuntimeError, match="after Shutdown"):
        s.on_validation_completed("r0", 0.4, 3)


def test_single_invalid_hp_is_not_replaced():
    s = make_searcher({"name": "single", "metric": "loss", "max_length": {"batches": 3}}, SPACE, 1)
    s.initial_operations()
    assert s.on_trial_exited_early("r0", "invalid_hp") == [Shutdown()]


# ---- grid -----------------------------------------------------------------------------------
GRID_SPACE = {
    "lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3},
    "optimizer": {
        "name": {"type": "categorical", "vals": ["sgd", "adam"]},
        "momentum": {"type": "double", "minval": 0.0, "maxval": 0.9, "count": 2},
    },
    "layers": {"type": "int", "minval": 1, "maxval": 4, "count": 3},
    "global_batch_size": {"type": "const", "val": 32},
}


def test_grid_covers_exactly_the_grid_in_order():
    conf = {"name": "grid", "metric": "acc", "smaller_is_better": False, "max_length": {"batches": 10}}
    s = make_searcher(conf, GRID_SPACE, 0)
    assert s.total_trials == 36
    runner = SimRunner(s, lambda hp, length, rid: hp["layers"] * hp["lr"], concurrency=3, seed=1).run()
    runner.assert_finished()
    expected = [
        {
            "lr": lr,
            "optimizer": {"name": name, "momentum": momentum},
            "layers": layers,
            "global_batch_size": 32,
        }
        for lr in (10.0**-3, 10.0**-2, 10.0**-1)
        for name in ("sgd", "adam")
        for momentum in (0.0, 0.9)
        for layers in (1, 3, 4)  # 1 + i * 3/2 rounded half away from zero: 1, 2.5 -> 3, 4
    ]
    assert [c.hparams for c in creates(runner.log)] == expected
    assert [c.request_id for c in creates(runner.log)] == [f"r{i}" for i in range(36)]
    # Every point trained once to max_length, then closed.
    assert all(t["lengths"] == [10] and t["closed"] for t in runner.trials.values())
    assert runner.units == 36 * 10


def test_grid_axes():
    points = grid_points(
        {
            "a": {"type": "int", "minval": 0, "maxval": 2, "count": 5},  # clamped to 3 integers
            "b": {"type": "int", "minval": 0, "maxval": 3, "count": 1},  # midpoint 1.5 -> 2
            "c": {"type": "double", "minval": 1.0, "maxval": 2.0, "count": 1},
            "d": {"type": "log", "minval": 0, "maxval": 4, "base": 2, "count": 1},
            "e": {"type": "int", "minval": -3, "maxval": 0, "count": 3},  # -3, -1.5 -> -2, 0
        }
    )
    assert points == [{"a": a, "b": 2, "c": 1.5, "d": 4.0, "e": e} for a in (0, 1, 2) for e in (-3, -2, 0)]
    assert grid_points({}) == [{}]


def test_grid_exited_trials_are_not_replaced():
    conf = {"name": "grid", "metric": "loss", "max_length": {"batches": 2}}
    space = {"k": {"type": "categorical", "vals": [1, 2, 3]}}
    s = make_searcher(conf, space, 0)
    runner = SimRunner(s, lambda hp, n, rid: hp["k"], exits={"r0": "invalid_hp", "r2": "errored"}).run()
    runner.assert_finished()
    assert len(creates(runner.log)) == 3
    assert [rid for rid, t in runner.trials.items() if t["closed"]] == ["r1"]


# ---- random ---------------------------------------------------------------------------------
RANDOM_SPACE = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
    "n": {"type": "int", "minval": 0, "maxval": 2},
    "dropout": {"type": "double", "minval": 0.1, "maxval": 0.5},
    "head": {"act": {"type": "categorical", "vals": ["relu", "tanh", {"name": "gelu"}]}},
    "seed_const": {"type": "const", "val": [1, 2]},
}


def random_conf(max_trials: int = 60) -> dict:
    return {"name": "random", "metric": "loss", "max_length": {"records": 640}, "max_trials": max_trials}


def test_random_samples_respect_ranges_types_and_max_trials():
    s = make_searcher(random_conf(), RANDOM_SPACE, 7)
    assert s.total_trials == 60
    runner = SimRunner(s, lambda hp, n, rid: hp["dropout"], concurrency=4, seed=3).run()
    runner.assert_finished()
    samples = [c.hparams for c in creates(runner.log)]
    assert len(samples) == 60
    for hp in samples:
        assert set(hp) == {"lr", "n", "dropout", "head", "seed_const"}
        assert isinstance(hp["lr"], float) and 1e-4 <= hp["lr"] <= 1e-1
        assert type(hp["n"]) is int and 0 <= hp["n"] <= 2
        assert isinstance(hp["dropout"], float) and 0.1 <= hp["dropout"] < 0.5
        assert hp["head"]["act"] in ("relu", "tanh", {"name": "gelu"})
        assert hp["seed_const"] == [1, 2]
    assert {hp["n"] for hp in samples} == {0, 1, 2}  # both ends of an int range are drawn
    assert {str(hp["head"]["act"]) for hp in samples} == {"relu", "tanh", "{'name': 'gelu'}"}
    # Trials do not share mutable values.
    samples[0]["seed_const"].append(3)
    assert samples[1]["seed_const"] == [1, 2]
    assert runner.units == 60 * 640


def test_random_is_the_seeded_stream_and_deterministic():
    first = make_searcher(random_conf(3), RANDOM_SPACE, 11).initial_operations()
    again = make_searcher(random_conf(3), RANDOM_SPACE, 11).initial_operations()
    other = make_searcher(random_conf(3), RANDOM_SPACE, 12).initial_operations()
    assert first == again
    assert [op.hparams for op in first if isinstance(op, Create)] != [
        op.hparams for op in other if isinstance(op, Create)
    ]
    # Leaves are drawn in config order from random.Random(seed), trial after trial.
    rng = random.Random(11)
    expected = []
    for _ in range(3):
        lr = 10.0 ** (-4 + rng.random() * 3)
        n = rng.randint(0, 2)
        dropout = 0.1 + rng.random() * 0.4
        act = ["relu", "tanh", {"name": "gelu"}][rng.randrange(3)]
        expected.append({"lr": lr, "n": n, "dropout": dropout, "head": {"act": act}, "seed_const": [1, 2]})
    assert [op.hparams for op in first if isinstance(op, Create)] == expected
    assert [type(op) for op in first] == [Create, ValidateAfter] * 3
    assert all(op.length == 640 for op in first if isinstance(op, ValidateAfter))


def test_random_replaces_invalid_hp_trials_only():
    s = make_searcher(random_conf(5), RANDOM_SPACE, 2)
    ops = s.initial_operations()
    assert [op.request_id for op in ops if isinstance(op, Create)] == ["r0", "r1", "r2", "r3", "r4"]
    replacement = s.on_trial_exited_early("r1", "invalid_hp")
    assert [type(op) for op in replacement] == [Create, ValidateAfter]
    assert replacement[0].request_id == "r5" and replacement[1] == ValidateAfter("r5", 640)
    assert replacement[0].hparams not in [op.hparams for op in ops if isinstance(op, Create)]
    assert s.progress() == 0.0  # an invalid trial does not count
    assert s.on_trial_exited_early("r2", "errored") == []  # counts as done, no replacement
    assert s.progress() == pytest.approx(1 / 5)
    assert s.on_trial_exited_early("r3", "user_canceled") == []
    for rid in ("r0", "r4"):
        assert s.on_validation_completed(rid, 1.0, 640) == [Close(rid)]
    assert s.progress() == pytest.approx(4 / 5)
    assert s.on_validation_completed("r5", 1.0, 640) == [Close("r5"), Shutdown()]
    with pytest.raises(RuntimeError, match="after Shutdown"):
        s.on_trial_exited_early("r5", "errored")


# ---- adaptive ASHA: plan --------------------------------------------------------------------
def test_asha_bracket_plans():
    def plan(**kw):
        return [
            (p.num_rungs, p.max_trials, p.max_concurrent_trials, p.rung_lengths)
            for p in plan_brackets(validate_searcher(asha_conf(**kw)))
        ]

    # R = min(5, log4(64)+1 = 4, log4(16)+1 = 3) = 3; standard: 3 and 2 rungs.
    # Weights 16/3 and 4/2: trials int(11.6) = 11 and int(4.4) = 4, remainder 1 to the first.
    # No max_concurrent_trials: each bracket max(4 = last bracket's trials, divisor 4).
    assert plan(
        mode="standard",
        divisor=4,
        max_rungs=5,
        max_length={"batches": 64},
        max_trials=16,
        max_concurrent_trials=None,
    ) == [(3, 12, 4, [4, 16, 64]), (2, 4, 4, [16, 64])]
    # Conservative R = 3: brackets 3, 2, 1 rungs; weights 16/3, 2, 1 of 25/3 -> 64, 24, 12.
    # max_concurrent_trials 5 over 3 brackets -> 2, 2, 1. Rung lengths: 100/16 -> 6, 100/4 -> 25.
    assert plan(
        mode="conservative",
        divisor=4,
        max_rungs=3,
        max_length={"epochs": 100},
        max_trials=100,
        max_concurrent_trials=5,
    ) == [(3, 64, 2, [6, 25, 100]), (2, 24, 2, [25, 100]), (1, 12, 1, [100])]
    # max_length caps the rungs: 4 <= 10 < 16 -> R = 2.
    assert plan(
        mode="aggressive",
        divisor=4,
        max_rungs=5,
        max_length={"batches": 10},
        max_trials=100,
        max_concurrent_trials=3,
    ) == [(2, 100, 3, [2, 10])]
    # Standard with R = min(5, log2(64)+1 = 7, log2(40)+1 = 6) = 5: 5, 4, 3 rungs, most first.
    five = plan(mode="standard", divisor=2, max_rungs=5, max_length={"batches": 64}, max_trials=40)
    assert [p[0] for p in five] == [5, 4, 3]
    assert [p[3] for p in five] == [[4, 8, 16, 32, 64], [8, 16, 32, 64], [16, 32, 64]]
    # Weights 16/5, 8/4, 4/3 of 6.533: int(19.59) = 19, int(12.24) = 12, int(8.16) = 8; +1 -> 20.
    assert [p[1] for p in five] == [20, 12, 8]
    s = make_searcher(
        asha_conf(mode="standard", divisor=2, max_rungs=5, max_length={"batches": 64}, max_trials=40), {}, 0
    )
    assert s.total_trials == 40


# ---- adaptive ASHA: behaviour ---------------------------------------------------------------
def ops_summary(ops) -> List[tuple]:
    out = []
    for op in ops:
        if isinstance(op, Create):
            out.append(("create", op.request_id))
        elif isinstance(op, ValidateAfter):
            out.append(("validate_after", op.request_id, op.length))
        elif isinstance(op, Close):
            out.append(("close", op.request_id))
        else:
            out.append(("shutdown",))
    return out


def run_sequential(conf, metrics, exits=None):
    s = make_searcher(conf, SPACE, 0)
    runner = SimRunner(s, by_creation_index(metrics), concurrency=1, exits=exits).run()
    runner.assert_finished()
    return s, runner


# One bracket, 3 rungs of 2, 4, 8 batches, divisor 2, 4 trials, one at a time. Metric of r<k> is
# metrics[k]. Worked by hand from the async rule (promote if in the top floor(k/2) of the k
# reports at a rung; if floor(k/2) grew, promote the trial now at that rank):
#   r0@2 = 5: 1 report, quota 0                 -> nothing promoted: create r1
#   r1@2 = 3: 2 reports, quota 1, r1 ranks 1st  -> promote r1 to 4
#   r1@4 = 3: 1 report at rung 1, quota 0       -> create r2
#   r2@2 = 4: 3 reports, quota 1, r2 ranks 2nd  -> create r3
#   r3@2 = 1: 4 reports, quota 2, r3 ranks 1st  -> promote r3; rung 0 complete: close r2, r0
#   r3@4 = 1: 2 reports at rung 1, r3 1st       -> promote r3 to 8; rung 1 settled: close r1
#   r3@8 = 1: top rung                          -> close r3, shutdown
EXPECTED_SEQUENTIAL = [
    [("create", "r0"), ("validate_after", "r0", 2)],
    [("create", "r1"), ("validate_after", "r1", 2)],
    [("validate_after", "r1", 4)],
    [("create", "r2"), ("validate_after", "r2", 2)],
    [("create", "r3"), ("validate_after", "r3", 2)],
    [("validate_after", "r3", 4), ("close", "r2"), ("close", "r0")],
    [("validate_after", "r3", 8), ("close", "r1")],
    [("close", "r3"), ("shutdown",)],
]


def grouped(runner) -> List[List[tuple]]:
    return [ops_summary(ops) for ops in runner.groups]


def test_asha_promotes_the_best_exactly():
    s, runner = run_sequential(asha_conf(), [5, 3, 4, 1])
    assert grouped(runner) == EXPECTED_SEQUENTIAL
    assert [(rid, length) for rid, length, _, _ in runner.reports] == [
        ("r0", 2),
        ("r1", 2),
        ("r1", 4),
        ("r2", 2),
        ("r3", 2),
        ("r3", 4),
        ("r3", 8),
    ]
    # Promoted trials resume: r0 2 + r1 4 + r2 2 + r3 8 units, not 2 + (2+4) + 2 + (2+4+8).
    assert runner.units == 16
    assert {rid: t["trained"] for rid, t in runner.trials.items()} == {"r0": 2, "r1": 4, "r2": 2, "r3": 8}


def test_asha_larger_is_better_mirrors_smaller_is_better():
    _, runner = run_sequential(asha_conf(smaller_is_better=False), [-5, -3, -4, -1])
    assert grouped(runner) == EXPECTED_SEQUENTIAL


def test_asha_invalid_hp_trial_is_removed_and_replaced():
    # r1 raises InvalidHP on its first run: it does not count, r2 replaces it; then as above
    # with r2, r3, r4 in the roles of r1, r2, r3.
    s, runner = run_sequential(asha_conf(), [5, None, 3, 4, 1], exits={"r1": "invalid_hp"})
    assert grouped(runner) == [
        [("create", "r0"), ("validate_after", "r0", 2)],
        [("create", "r1"), ("validate_after", "r1", 2)],  # r0@2
        [("create", "r2"), ("validate_after", "r2", 2)],  # r1 exits: invalid_hp
        [("validate_after", "r2", 4)],
        [("create", "r3"), ("validate_after", "r3", 2)],
        [("create", "r4"), ("validate_after", "r4", 2)],
        [("validate_after", "r4", 4), ("close", "r3"), ("close", "r0")],
        [("validate_after", "r4", 8), ("close", "r2")],
        [("close", "r4"), ("shutdown",)],
    ]
    assert len(creates(runner.log)) == 5 and s.total_trials == 4
    assert runner.trials["r1"]["exited"] == "invalid_hp" and not runner.trials["r1"]["closed"]
    assert runner.units == 16


def test_asha_errored_trial_counts_as_worst():
    # r1 errors on its first run: it is the worst of rung 0 (2 reports, quota 1), so r0 is
    # promoted. r2 (3) beats r0 (5) at rung 0 and rung 1 and goes to the top. r3 (4) is promoted
    # at rung 0 (4 reports, quota 2, rank 2) but loses to r2 at rung 1; r0 is closed there.
    s, runner = run_sequential(asha_conf(), [5, None, 3, 4], exits={"r1": "errored"})
    assert grouped(runner) == [
        [("create", "r0"), ("validate_after", "r0", 2)],
        [("create", "r1"), ("validate_after", "r1", 2)],  # r0@2
        [("validate_after", "r0", 4)],  # r1 exits: errored
        [("create", "r2"), ("validate_after", "r2", 2)],  # r0@4
        [("validate_after", "r2", 4)],  # r2@2
        [("validate_after", "r2", 8)],  # r2@4
        [("close", "r2"), ("create", "r3"), ("validate_after", "r3", 2)],  # r2@8
        [("validate_after", "r3", 4)],  # r3@2
        [("close", "r3"), ("close", "r0"), ("shutdown",)],  # r3@4
    ]
    assert [r[0] for r in runner.reports] == ["r0", "r0", "r2", "r2", "r2", "r3", "r3"]
    assert len(creates(runner.log)) == 4
    assert runner.units == 4 + 0 + 8 + 4


def promotion_audit(s, runner, divisor):
    """Check every promotion against the reports seen so far at that rung, and the end state."""
    seen: Dict[tuple, List[tuple]] = collections.defaultdict(list)  # (bracket, rung) -> [(metric, order)]
    promoted_from: Dict[tuple, set] = collections.defaultdict(set)
    plans = s.plan
    sign = 1 if s.smaller_is_better else -1
    for order, (rid, length, metric, ops) in enumerate(runner.reports):
        b = s.bracket_of(rid)
        lengths = plans[b].rung_lengths
        rung = lengths.index(length)
        seen[(b, rung)].append((sign * metric, order, rid))
        ranked = [x[2] for x in sorted(seen[(b, rung)])]
        quota = int(len(ranked) / divisor)
        for op in ops:
            if isinstance(op, ValidateAfter) and op.length != lengths[0]:
                # A promotion out of this rung: into the next rung, of a trial in the top quota.
                assert op.length == lengths[rung + 1]
                assert op.request_id in ranked[:quota], (op, ranked, quota)
                promoted_from[(b, rung)].add(op.request_id)
    for (b, rung), entries in seen.items():
        if rung == len(plans[b].rung_lengths) - 1:
            continue
        ranked = [x[2] for x in sorted(entries)]
        best = ranked[: int(len(ranked) / divisor)]
        # The best 1/divisor were promoted; every trial left behind was closed there.
        assert set(best) <= promoted_from[(b, rung)]
        for rid in set(ranked) - promoted_from[(b, rung)]:
            assert (
                runner.trials[rid]["closed"] and runner.trials[rid]["trained"] == plans[b].rung_lengths[rung]
            )
    return promoted_from


def standard_conf(**kw):
    conf = asha_conf(
        mode="standard",
        divisor=4,
        max_rungs=5,
        max_length={"batches": 64},
        max_trials=16,
        max_concurrent_trials=None,
    )
    conf.update(kw)
    return conf


def quadratic(hp, length, rid):
    # Better with training; the best x is 0.3.
    return (hp["x"] - 0.3) ** 2 + 1.0 / length


@pytest.mark.parametrize("concurrency,seed", [(1, 0), (3, 1), (8, 2), (16, 3)])
def test_asha_random_completion_order(concurrency, seed):
    s = make_searcher(standard_conf(), SPACE, seed)
    runner = SimRunner(s, quadratic, concurrency=concurrency, seed=seed).run()
    runner.assert_finished()
    assert len(creates(runner.log)) == 16
    assert sum(1 for c in creates(runner.log) if s.bracket_of(c.request_id) == 0) == 12
    promotion_audit(s, runner, 4)
    # Every trial trained to exactly one rung length of its bracket, starting at rung 0.
    total = 0
    for rid, t in runner.trials.items():
        lengths = s.plan[s.bracket_of(rid)].rung_lengths
        assert t["lengths"] == lengths[: len(t["lengths"])]
        total += t["lengths"][-1]
    assert runner.units == total
    # Early stopping: far less than 16 trials * 64 batches.
    assert runner.units < 16 * 64 / 2
    # Bracket 1 (16, 64): 4 reports at rung 0 always promote one trial to the top.
    assert 1 in {s.bracket_of(rid) for rid, t in runner.trials.items() if t["trained"] == 64}


def test_asha_bracket_zero_promotions_with_four_way_divisor():
    # Bracket 0 (3 rungs: 4, 16, 64) of the standard plan, metric by creation index, one at a time.
    # Bracket 0 creates r0..r3 first, bracket 1 r4..r7 (4 concurrent each, no max_concurrent_trials).
    metrics = [float(v) for v in [9, 8, 7, 6, 20, 21, 22, 23, 5, 4, 3, 2, 1, 0.5, 0.25, 0.125]]
    s = make_searcher(standard_conf(), SPACE, 0)
    runner = SimRunner(s, by_creation_index(metrics), concurrency=1).run()
    runner.assert_finished()
    promoted = promotion_audit(s, runner, 4)
    assert [c.request_id for c in creates(runner.log)] == [f"r{i}" for i in range(16)]
    assert [s.bracket_of(f"r{i}") for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    # FIFO, one at a time: r0, r1, r2, r3 report first (quota 1 reached at the 4th: r3 = 6 is the
    # best and is promoted at once), then the bracket-1 trials, then bracket 0's replacements.
    assert runner.reports[3][0] == "r3" and ops_summary(runner.reports[3][3]) == [
        ("validate_after", "r3", 16)
    ]
    # Each later bracket-0 trial is better than everything before it, so it ranks 1st at rung 0
    # and is promoted at once; rung 1 promotes when its quota grows (4 reports -> 1 trial).
    assert sorted(promoted[(0, 0)], key=lambda r: int(r[1:])) == [
        "r3",
        "r8",
        "r9",
        "r10",
        "r11",
        "r12",
        "r13",
        "r14",
        "r15",
    ]
    assert promoted[(1, 0)] == {"r4"}  # bracket 1: the 4th report (r7 = 23) promotes r4 = 20
    top = [rid for rid, t in runner.trials.items() if t["trained"] == 64]
    assert sorted(top, key=lambda r: int(r[1:])) == ["r4", "r10", "r11", "r12", "r13", "r14", "r15"]
    closed_at = {rid: t["trained"] for rid, t in runner.trials.items() if t["trained"] < 64}
    assert closed_at == {
        "r0": 4,
        "r1": 4,
        "r2": 4,
        "r3": 16,
        "r8": 16,
        "r9": 16,
        "r5": 16,
        "r6": 16,
        "r7": 16,
    }
    assert runner.units == 3 * 4 + 6 * 16 + 7 * 64


def test_asha_is_deterministic_for_a_seed():
    logs = [
        SimRunner(make_searcher(standard_conf(), SPACE, 9), quadratic, concurrency=5, seed=4).run().log
        for _ in range(2)
    ]
    assert logs[0] == logs[1]


def test_asha_event_errors():
    s = make_searcher(asha_conf(), SPACE, 0)
    with pytest.raises(RuntimeError, match="before initial_operations"):
        s.on_validation_completed("r0", 1.0, 2)
    s.initial_operations()
    with pytest.raises(RuntimeError, match="already ran"):
        s.initial_operations()
    with pytest.raises(KeyError, match="unknown trial request id 'r9'"):
        s.on_validation_completed("r9", 1.0, 2)
    with pytest.raises(ValueError, match="unknown exit reason 'oom'"):
        s.on_trial_exited_early("r0", "oom")
    assert s.on_validation_completed("r0", 1.0, 1) == []  # before the target length: ignored
    s.on_validation_completed("r0", 1.0, 2)
    with pytest.raises(RuntimeError, match="no pending ValidateAfter"):
        s.on_validation_completed("r0", 1.0, 2)


def test_asha_nan_metric_is_the_worst():
    # r1 reports NaN: ranks below r0, so r0 is promoted by the quota (like an errored trial).
    s, runner = run_sequential(asha_conf(), [5, math.nan, 3, 4])
    assert ops_summary(runner.reports[1][3]) == [("validate_after", "r0", 4)]


# ---- resume ---------------------------------------------------------------------------------
def resumed_log(conf, space, seed, metric_fn, concurrency, cut_after, exits=None):
    """Run to ``cut_after`` events, rebuild the searcher from a JSON round-trip of its
    state_dict(), continue to the end; the runner (and its pending work) carries over."""
    runner = SimRunner(
        make_searcher(conf, space, seed), metric_fn, concurrency=concurrency, seed=5, exits=exits
    )
    runner.run(max_steps=cut_after)
    state = json.loads(json.dumps(runner.searcher.state_dict()))
    progress = runner.searcher.progress()
    fresh = make_searcher(conf, space, seed)
    fresh.load_state_dict(state)
    assert fresh.progress() == progress
    runner.searcher = fresh
    runner.run()
    runner.assert_finished()
    return runner.log


@pytest.mark.parametrize("cut_after", [0, 1, 5, 11, 17, 23])
def test_asha_resume_from_state_dict_gives_the_same_operations(cut_after):
    conf = standard_conf(max_trials=24, max_concurrent_trials=5)
    exits = {"r2": "invalid_hp", "r6": "errored", "r9": "user_canceled"}
    full = SimRunner(make_searcher(conf, SPACE, 3), quadratic, concurrency=4, seed=5, exits=exits).run()
    full.assert_finished()
    assert resumed_log(conf, SPACE, 3, quadratic, 4, cut_after, exits) == full.log


@pytest.mark.parametrize("cut_after", [0, 2, 7])
def test_random_resume_from_state_dict_gives_the_same_operations(cut_after):
    conf = random_conf(8)
    exits = {"r1": "invalid_hp", "r3": "invalid_hp", "r4": "errored"}
    metric = lambda hp, n, rid: hp["dropout"]  # noqa: E731
    full = SimRunner(make_searcher(conf, RANDOM_SPACE, 4), metric, concurrency=3, seed=5, exits=exits).run()
    assert len(creates(full.log)) == 10
    assert resumed_log(conf, RANDOM_SPACE, 4, metric, 3, cut_after, exits) == full.log


def test_load_state_dict_rejects_another_config():
    s = make_searcher(standard_conf(), SPACE, 0)
    s.initial_operations()
    state = s.state_dict()
    with pytest.raises(ValueError, match="searcher config changed"):
        make_searcher(standard_conf(max_trials=17), SPACE, 0).load_state_dict(state)
    with pytest.raises(ValueError, match="saved by the 'adaptive_asha' searcher, not 'random'"):
        make_searcher(random_conf(), SPACE, 0).load_state_dict(state)


def test_operations_round_trip_through_json():
    ops = [Create("r0", {"a": {"b": [1, 2]}}), ValidateAfter("r0", 7), Close("r0"), Shutdown()]
    assert [op_from_dict(json.loads(json.dumps(op_to_dict(op)))) for op in ops] == ops
    with pytest.raises(ValueError, match="unknown searcher operation 'train'"):
        op_from_dict({"op": "train"})


def test_asha_progress_reaches_one_only_at_shutdown():
    s = make_searcher(standard_conf(), SPACE, 0)
    runner = SimRunner(s, quadratic, concurrency=2, seed=0)
    runner.apply(s.initial_operations())
    values = [s.progress()]
    while runner.step():
        values.append(s.progress())
    assert values[0] == 0.0 and values[-1] == 1.0
    assert all(v < 1.0 for v in values[:-1])


@pytest.mark.parametrize("mode", ["aggressive", "standard", "conservative"])
def test_asha_survives_early_exits_at_any_rung(mode):
    # Trials exit at random rungs for random reasons (also after rung 0 was closed out): the
    # runner checks that no closed or exited trial is ever given work and nothing is closed twice.
    for seed in range(12):
        rng = random.Random(seed)
        conf = standard_conf(
            mode=mode, max_trials=20, divisor=2, max_rungs=4, max_concurrent_trials=rng.choice([0, 2, 6])
        )
        exits = {
            f"r{i}": (rng.choice(["invalid_hp", "errored", "user_canceled"]), rng.randrange(3))
            for i in rng.sample(range(24), 8)
        }
        s = make_searcher(conf, SPACE, seed)
        runner = SimRunner(s, quadratic, concurrency=rng.choice([1, 3, 7]), seed=seed, exits=exits).run()
        runner.assert_finished()
        invalid = sum(t["exited"] == "invalid_hp" for t in runner.trials.values())
        assert len(runner.trials) - invalid == s.total_trials == 20
