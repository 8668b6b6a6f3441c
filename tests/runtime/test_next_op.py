"""The chief's question "what next?" and the runner's answer (``runtime/_next_op.py``): files
beside ``result.json``, claimed exactly once, never waited on indefinitely."""

from __future__ import annotations

import os
import threading
import time

import pytest

from determined_lite.runtime._next_op import (
    answer,
    answer_path,
    ask_next_length,
    question_path,
    remove_next_op_files,
    take_question,
)
from determined_lite.runtime._spec import WorkerSpec


def _spec(tmp_path, ask: bool = True, length: int = 4) -> WorkerSpec:
    return WorkerSpec(
        entrypoint="m:T",
        context_dir=str(tmp_path),
        exp_conf={},
        hparams={},
        result_path=os.path.join(str(tmp_path), "result.json"),
        max_length={"batches": length},
        trial_seed=1,
        settings={},
        ask_next_op=ask,
    )


def _runner(spec: WorkerSpec, reply, seen: list) -> threading.Thread:
    """A runner that claims the question once it is there and answers ``reply(question)``."""

    def run() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            question = take_question(spec.result_path)
            if question is not None:
                seen.append(question)
                answer(spec.result_path, *reply(question))
                return
            time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_promotion_updates_the_spec_and_asks_again_only_when_told(tmp_path):
    spec, seen = _spec(tmp_path), []
    thread = _runner(spec, lambda q: (8, True), seen)
    assert ask_next_length(spec, 0.25) == 8
    thread.join()
    assert seen == [{"length": 4, "metric": 0.25}]
    assert spec.max_length == {"batches": 8} and spec.ask_next_op is True
    # Nothing is left behind for the next question.
    assert not os.path.exists(question_path(spec.result_path))
    assert not os.path.exists(answer_path(spec.result_path))
    thread = _runner(spec, lambda q: (16, False), seen)
    assert ask_next_length(spec, 0.125) == 16
    thread.join()
    assert seen[-1] == {"length": 8, "metric": 0.125}
    assert spec.max_length == {"batches": 16} and spec.ask_next_op is False
    # The top: it does not ask (no runner answers here; asking would wait).
    start = time.monotonic()
    assert ask_next_length(spec, 0.1) is None
    assert time.monotonic() - start < 0.5 and not os.path.exists(question_path(spec.result_path))


def test_no_further_operation_ends_the_run(tmp_path):
    spec, seen = _spec(tmp_path), []
    thread = _runner(spec, lambda q: (None, True), seen)
    assert ask_next_length(spec, 1.5) is None
    thread.join()
    assert seen == [{"length": 4, "metric": 1.5}]
    assert spec.max_length == {"batches": 4} and spec.ask_next_op is False


def test_an_unclaimed_question_is_withdrawn_after_the_wait(tmp_path, monkeypatch):
    """No runner takes it: the chief ends its run as before, and the runner finds nothing later."""
    monkeypatch.setenv("DET_LITE_NEXT_OP_WAIT", "0.3")
    spec = _spec(tmp_path)
    start = time.monotonic()
    assert ask_next_length(spec, 1.0) is None
    assert 0.3 <= time.monotonic() - start < 5
    assert take_question(spec.result_path) is None
    assert spec.max_length == {"batches": 4}


def test_a_question_claimed_at_the_deadline_waits_for_its_answer(tmp_path, monkeypatch):
    """The runner's rename and the chief's withdrawal cannot both succeed: once claimed, the
    chief waits for the answer even past its claim wait."""
    monkeypatch.setenv("DET_LITE_NEXT_OP_WAIT", "0.2")
    spec, seen = _spec(tmp_path), []

    def slow_runner() -> None:
        while (question := take_question(spec.result_path)) is None:
            time.sleep(0.005)
        seen.append(question)
        time.sleep(0.5)  # answers after the chief's claim wait ran out
        answer(spec.result_path, 6, False)

    thread = threading.Thread(target=slow_runner, daemon=True)
    thread.start()
    assert ask_next_length(spec, 2.0) == 6
    thread.join()
    assert len(seen) == 1 and spec.max_length == {"batches": 6}


def test_no_metric_or_no_ask_asks_nothing(tmp_path):
    spec = _spec(tmp_path)
    assert ask_next_length(spec, None) is None
    assert ask_next_length(_spec(tmp_path, ask=False), 1.0) is None
    assert not os.path.exists(question_path(spec.result_path))


def test_remove_next_op_files(tmp_path):
    spec = _spec(tmp_path)
    for path in (question_path(spec.result_path), answer_path(spec.result_path)):
        with open(path, "w") as f:
            f.write("{}")
    remove_next_op_files(spec.result_path)
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("metric", ["x", True, None])
def test_a_question_without_a_number_has_no_metric(tmp_path, metric):
    spec = _spec(tmp_path)
    import json

    with open(question_path(spec.result_path), "w") as f:
        json.dump({"length": 4, "metric": metric}, f)
    assert take_question(spec.result_path) == {"length": 4, "metric": None}
