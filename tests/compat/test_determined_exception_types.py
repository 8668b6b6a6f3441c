"""Exception types Determined's users catch (issue 12, item 9), and the messages Determined's own
harness tests match (issue 30, item 6): det-lite raises errors that are also what Determined
raises in the same place, with the phrases Determined's tests look for."""

from __future__ import annotations

import logging
import queue
from logging import handlers
from typing import Any

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.compat import install_alias
from determined_lite.pytorch._reducer import check_evaluation_reducer, wrap_reducer
from tests.fixtures.loop_trials import PlainLoaderTrial
from tests.pytorch.test_context import run
from tests.pytorch.test_reducer import _with_reducer, fit


def test_reducer_name_dict_rule_raises_assertion_error() -> None:
    # Determined (_PyTorchReducerContext.run_cross_slot_reduction): "raise AssertionError(...)"
    # when a reducer wrapped with name= returns a dict, or with name=None returns a non-dict.
    # The phrases are those Determined's test_pytorch_trial.py matches.
    with pytest.raises(AssertionError, match="with name set but it returned a dict anyway"):
        fit(_with_reducer(lambda v: {"a": 1, "b": 2}, "acc"))
    with pytest.raises(AssertionError, match="name=None but it did not return a dict"):
        fit(_with_reducer(lambda v: 1.5, None))


def test_reducer_wrapped_twice_or_not_callable_raises_assertion_error() -> None:
    # Determined (wrap_reducer): the same reducer object wrapped twice, or a reducer that is
    # neither a function nor a MetricReducer, raises AssertionError.
    class Count(pytorch.MetricReducer):
        def reset(self) -> None:
            self.n = 0

        def per_slot_reduce(self) -> int:
            return self.n

        def cross_slot_reduce(self, per_slot_metrics: list) -> int:
            return sum(per_slot_metrics)

    with pytorch.init(hparams={"global_batch_size": 2}, enable_tensorboard_logging=False) as ctx:
        count = ctx.wrap_reducer(Count(), name="a")
        with pytest.raises(AssertionError, match="already called on this Count"):
            ctx.wrap_reducer(count, name="b")
        with pytest.raises(AssertionError, match="reducer named 'a' is already registered"):
            ctx.wrap_reducer(len, name="a")
    with pytest.raises(AssertionError, match=r"must be a function"):
        wrap_reducer(42, "x", True, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a function"):  # det-lite's earlier type, kept
        wrap_reducer(42, "x", True, True)  # type: ignore[arg-type]


def test_plain_loader_without_the_opt_out_raises_runtime_error() -> None:
    # Determined (_PyTorchTrialController): a loader that is not det.pytorch.DataLoader, without
    # disable_dataset_reproducibility_checks(), raises RuntimeError.
    # Determined's test_require_disable_dataset_reproducibility matches this phrase.
    with pytest.raises(RuntimeError, match="you can disable this check by calling"):
        run(PlainLoaderTrial, max_length=pytorch.Batch(2))


@pytest.mark.parametrize("returned", [{}, {"loss1": pytorch.Reducer.AVG, "loss2": 2}, 2])
def test_evaluation_reducer_without_reducers_is_invalid_experiment(returned: object) -> None:
    # Determined (_metric_utils._prepare_metrics_reducers, test_metric_utils.py): an empty dict
    # or a value that is not a Reducer raises determined.errors.InvalidExperimentException.
    install_alias()
    import determined

    with pytest.raises(determined.errors.InvalidExperimentException):
        check_evaluation_reducer(returned)


@pytest.mark.parametrize("dedup_between_calls", [True, False])
def test_to_device_warns_once_per_type(dedup_between_calls: bool) -> None:
    # Determined's test_pytorch_data.py test_to_device_warnings, as it is written there: a
    # warning per unsupported type per call, or once across calls sharing warned_types.
    logger = logging.getLogger()
    q: "queue.Queue[logging.LogRecord]" = queue.Queue()
    handler = handlers.QueueHandler(q)
    logger.addHandler(handler)
    try:
        warned_types: Any = set() if dedup_between_calls else None
        pytorch.to_device(["string_data", "string_data"], "cpu", warned_types)
        pytorch.to_device(["string_data", "string_data"], "cpu", warned_types)
        assert q.qsize() == (1 if dedup_between_calls else 2)
        while q.qsize():
            assert "not able to move data" in q.get().message
    finally:
        logger.removeHandler(handler)
    assert pytorch.to_device({"a": [np.ones(2)]}, "cpu")["a"][0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("value", [0, "text", None, torch.tensor(3.0), [1, 2]])
def test_data_length_of_a_value_of_the_wrong_type_is_a_type_error(value: object) -> None:
    # Determined's data_length: "raise TypeError('Data of incorrect type: ...')" for what is not
    # an array, tensor, dict, list or tuple (and len() of a 0-d tensor or an int is a TypeError).
    install_alias()
    from determined.pytorch import data_length

    with pytest.raises(TypeError, match="cannot"):
        data_length(value)


def test_data_length_of_an_empty_container_is_a_value_error() -> None:
    # Determined: an empty dict, list or tuple raises ValueError.
    for empty in ({}, [], ()):
        with pytest.raises(ValueError):
            pytorch.data_length(empty)
    assert pytorch.data_length({"x": np.zeros((5, 2))}) == 5
