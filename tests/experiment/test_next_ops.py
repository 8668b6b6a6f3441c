"""ASHA promotions decided when a trial reports train on in its process (``_next_ops.py``), with
exactly the results of the same promotions resumed from checkpoints in new processes
(``DET_LITE_NEXT_OP=0``): the same metrics, the same weights, bit for bit."""

from __future__ import annotations

import os
import re
import types
from typing import Any, Dict, List, Tuple

import pytest
import torch

from determined_lite.experiment._next_ops import answer_next_ops
from determined_lite.runtime._next_op import answer_path, question_path
from tests.cli_helpers import asha_overrides, cli, describe
from tests.cli_helpers import write_config as _write_config
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
SCRIPTS = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
PROMOTED = re.compile(r"trial (\d+) promoted at (\d+): train to (\d+) batches in its process")

LRS = {"type": "categorical", "vals": [0.001, 0.003, 0.01, 0.02]}


def _search(
    tmp_path: Any, source: str, context: str, in_process: bool, wait: str = "2", **changes: Any
) -> Tuple[Dict, str]:
    """Run the search in a home of its own; (the experiment's records, the runner's output);
    ``wait``: how long runs wait for the runner to take their question."""
    which = f"in-process-{wait}" if in_process else "new-process"
    home = os.path.join(str(tmp_path), f"home-{which}")
    env = dict(os.environ, DET_LITE_HOME=home, DET_LITE_NEXT_OP="1" if in_process else "0")
    env["DET_LITE_NEXT_OP_WAIT"] = wait
    path = _write_config(source, tmp_path, f"{which}.yaml", **changes)
    proc = cli("experiment", "create", path, context, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return describe(1, home=home), proc.stdout


def _by_lr(described: Dict[str, Any]) -> Dict[float, Dict[str, Any]]:
    return {t["hparams"]["lr"]: t for t in described["trials"]}


def _state(trial: Dict[str, Any]) -> Dict[str, Any]:
    """The latest checkpoint's weights, optimizer state and RNG streams."""
    latest = max(trial["checkpoints"], key=lambda c: c["total_batches"])
    state = torch.load(os.path.join(latest["path"], "state_dict.pth"), weights_only=True)
    context = state["context"]
    models, optimizers = context["models_state_dict"], context["optimizers_state_dict"]
    return {"models": models, "optimizers": optimizers, "rng": state["rng"]}


def _assert_identical(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _assert_same_searches(ours: Dict[str, Any], theirs: Dict[str, Any]) -> None:
    """Same trials, same lengths, metrics equal as numbers (not approximately), same weights."""
    mine, other = _by_lr(ours), _by_lr(theirs)
    assert sorted(mine) == sorted(other)
    for lr, trial in mine.items():
        twin = other[lr]
        assert (trial["state"], trial["total_batches"]) == (twin["state"], twin["total_batches"])
        for kind in ("validation_metrics", "training_metrics"):
            assert [(m["total_batches"], m["metrics"]) for m in trial[kind]] == [
                (m["total_batches"], m["metrics"]) for m in twin[kind]
            ], (lr, kind)
        _assert_identical(_state(trial), _state(twin), f"lr {lr}")


def _promotions(out: str) -> List[Tuple[int, int, int]]:
    return [tuple(int(g) for g in m.groups()) for m in PROMOTED.finditer(out)]  # type: ignore[misc]


def _linear_asha(**extra: Any) -> Dict[str, Any]:
    changes = asha_overrides(**{"hyperparameters.lr": LRS, "min_validation_period": None, **extra})
    changes["searcher"] = {**changes["searcher"], "max_concurrent_trials": 1}  # one order of reports
    return changes


@pytest.mark.timeout(240)
def test_in_process_promotions_equal_resumed_ones_closed_form(tmp_path):
    source = os.path.join(LINEAR, "const.yaml")
    ours, out = _search(tmp_path, source, LINEAR, True, **_linear_asha())
    theirs, their_out = _search(tmp_path, source, LINEAR, False, **_linear_asha())
    promoted = _promotions(out)
    assert promoted and not _promotions(their_out)
    runs = {t["id"]: len(t["runs"]) for t in ours["trials"]}
    their_runs = {t["id"]: len(t["runs"]) for t in theirs["trials"]}
    for trial_id, at, to in promoted:
        assert to > at and runs[trial_id] < their_runs[trial_id]  # one process less per promotion
    assert sum(their_runs.values()) - sum(runs.values()) == len(promoted)
    _assert_same_searches(ours, theirs)
    for trial in ours["trials"]:  # and both equal the closed form
        lr = trial["hparams"]["lr"]
        for v in trial["validation_metrics"]:
            w = closed_form(lr, v["total_batches"], batch_size=2, n=8)[-1]
            assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
            assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


@pytest.mark.timeout(240)
def test_a_question_not_taken_in_time_ends_the_run_as_before(tmp_path):
    """Runs that wait 0 s for the runner withdraw their question at once: they end, and the
    runner reads their metric from result.json, as when promotions were never in the process;
    the search's results do not change."""
    source = os.path.join(LINEAR, "const.yaml")
    ours, out = _search(tmp_path, source, LINEAR, True, wait="0", **_linear_asha())
    theirs, _ = _search(tmp_path, source, LINEAR, False, **_linear_asha())
    _assert_same_searches(ours, theirs)
    # (Such a chief does not announce its question: the runner could take it only in the
    # microseconds between its write and its withdrawal, woken then by another event.)
    assert not _promotions(out)
    assert sum(len(t["runs"]) for t in ours["trials"]) == sum(len(t["runs"]) for t in theirs["trials"])


@pytest.mark.timeout(240)
def test_in_process_promotions_keep_the_rng_streams_and_data_order(tmp_path):
    """Shuffled batches and a random term in the loss: a promotion in the process gives the
    weights a resume from the checkpoint gives (RNG streams and data order carried on)."""
    source = os.path.join(LINEAR, "const.yaml")
    changes = _linear_asha(**{"hyperparameters.noise": 0.5})
    ours, out = _search(tmp_path, source, LINEAR, True, **changes)
    theirs, _ = _search(tmp_path, source, LINEAR, False, **changes)
    assert _promotions(out)
    _assert_same_searches(ours, theirs)


def _core_asha() -> Dict[str, Any]:
    return {
        "searcher": {
            "name": "adaptive_asha",
            "metric": "val_loss",
            "max_length": {"batches": 8},
            "max_trials": 4,
            "max_rungs": 3,
            "divisor": 2,
            "mode": "aggressive",
            "max_concurrent_trials": 1,
        },
        "hyperparameters": {"lr": LRS},
    }


@pytest.mark.timeout(240)
def test_core_api_operations_go_on_in_the_process(tmp_path):
    """``core.searcher.operations()`` yields the promotion's operation in the same run."""
    source = os.path.join(SCRIPTS, "core.yaml")
    ours, out = _search(tmp_path, source, SCRIPTS, True, **_core_asha())
    theirs, their_out = _search(tmp_path, source, SCRIPTS, False, **_core_asha())
    assert _promotions(out) and not _promotions(their_out)
    mine, other = _by_lr(ours), _by_lr(theirs)
    for lr, trial in mine.items():
        assert trial["total_batches"] == other[lr]["total_batches"]
        assert [(v["total_batches"], v["metrics"]) for v in trial["validation_metrics"]] == [
            (v["total_batches"], v["metrics"]) for v in other[lr]["validation_metrics"]
        ]
    # An in-process promotion restores nothing: its run printed one restore less.
    assert out.count("core: restored") == their_out.count("core: restored") - len(_promotions(out))


@pytest.mark.timeout(240)
def test_two_slots_the_chief_asks_and_every_rank_trains_on(tmp_path):
    source = os.path.join(LINEAR, "const.yaml")
    changes = _linear_asha(
        **{"resources.slots_per_trial": 2, "hyperparameters.global_batch_size": 4, "max_restarts": 0}
    )
    changes["searcher"] = {**changes["searcher"], "max_trials": 2, "max_rungs": 2}
    # The second trial (lr 0.005; the first gets 0.003) is the better at the first rung, which
    # promotes it as it reports.
    changes["hyperparameters.lr"] = {"type": "categorical", "vals": [0.001, 0.005, 0.003, 0.002]}
    ours, out = _search(tmp_path, source, LINEAR, True, **changes)
    theirs, _ = _search(tmp_path, source, LINEAR, False, **changes)
    assert _promotions(out)
    _assert_same_searches(ours, theirs)


# --- the runner's answer, without processes ------------------------------------------------------


class _Searcher:
    def __init__(self, ops: List[Any]) -> None:
        self.ops, self.reports = ops, []

    def on_validation_completed(self, rid: str, metric: float, length: int) -> List[Any]:
        self.reports.append((rid, metric, length))
        return self.ops


def _runner(tmp_path: Any, pausing: bool, promote_to: Any) -> Any:
    """A runner's runs (one, asking) and search, as ``answer_next_ops`` sees them."""
    request = types.SimpleNamespace(request_id="r1", trial_id=1, pending=2, trained=0, closed=False)
    spec = types.SimpleNamespace(ask_next_op=True, result_path=os.path.join(str(tmp_path), "result.json"))
    run = types.SimpleNamespace(request=request, spec=spec, length=2, reported=False)
    searcher = _Searcher([] if promote_to is None else [promote_to])

    def report(request: Any, metric: float, length: int) -> None:
        for op in searcher.on_validation_completed(request.request_id, metric, length):
            request.pending = op

    search = types.SimpleNamespace(pausing=pausing, report=report, searcher=searcher)
    logged: List[str] = []
    logs = types.SimpleNamespace(log=lambda trial_id, line: logged.append(line))
    goal = lambda n: f"train to {n} batches"  # noqa: E731
    launcher = types.SimpleNamespace(asks_next_op=lambda n: n < 8, goal=goal)

    class FakeRuns(list):  # iterated as Runs is
        pass

    runs = FakeRuns([run])
    runs.running, runs.logs, runs.launcher = {"r1": run}, logs, launcher
    fake = {"runs": runs, "search": search, "running": runs.running, "logged": logged, "searcher": searcher}
    return types.SimpleNamespace(**fake)


def _ask(runner: Any) -> Dict[str, Any]:
    import json

    path = runner.running["r1"].spec.result_path
    with open(question_path(path), "w") as f:
        json.dump({"length": 2, "metric": 0.5}, f)
    answer_next_ops(runner.runs, runner.search)
    with open(answer_path(path)) as f:
        return dict(json.load(f))


@pytest.mark.parametrize(
    "pausing, promote_to, expected",
    [
        (False, 4, {"length": 4, "ask": True}),
        (False, 8, {"length": 8, "ask": False}),
        (False, None, {"length": None, "ask": False}),
        (True, 4, {"length": None, "ask": False}),  # pausing: it ends; its exit requeues it
    ],
)
def test_the_runner_answers_with_the_searchers_decision(tmp_path, pausing, promote_to, expected):
    runner = _runner(tmp_path, pausing, promote_to)
    assert _ask(runner) == expected
    run = runner.running["r1"]
    assert runner.searcher.reports == [("r1", 0.5, 2)]
    assert run.request.trained == 2 and run.request.pending == promote_to
    if expected["length"] is not None:  # trains on: its next report goes to the searcher too
        assert (run.length, run.reported, run.spec.ask_next_op) == (promote_to, False, expected["ask"])
        assert runner.logged == [f"trial 1 promoted at 2: train to {promote_to} batches in its process"]
    else:  # ends: its exit gives the searcher nothing more (and requeues it if promoted)
        assert run.reported and run.length == 2 and not runner.logged


@pytest.mark.parametrize(
    "pending, closed, requeued", [(8, False, True), (None, False, False), (8, True, False)]
)
def test_a_reported_runs_exit_gives_the_searcher_nothing_again(pending, closed, requeued):
    """Whatever its exit status, a run whose metric went to the searcher as it asked is not
    reported again; promoted while it exited (``pending``), it is queued to resume."""
    from determined_lite.experiment._runs import Runs

    search = types.SimpleNamespace(queue=[], saved=0)

    def requeue(request: Any) -> None:  # Search.requeue's
        search.queue.insert(0, request.request_id)
        search.saved += 1

    search.requeue = requeue
    runs = object.__new__(Runs)
    runs.search = search
    request = types.SimpleNamespace(request_id="r1", pending=pending, closed=closed)
    process = types.SimpleNamespace(result=lambda code: pytest.fail("the result is not read"))
    run = types.SimpleNamespace(request=request, process=process, reported=True)
    runs.handle_exit(run, 1, False)
    assert search.queue == (["r1"] if requeued else [])
