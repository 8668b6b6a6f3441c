"""Exception types Determined's users catch (issue 12, item 9). det-lite keeps its own messages
and raises errors that are also what Determined raises in the same place."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.compat import install_alias
from determined_lite.pytorch._reducer import wrap_reducer
from tests.fixtures.loop_trials import PlainLoaderTrial
from tests.pytorch.test_context import run
from tests.pytorch.test_reducer import _with_reducer, fit


def test_reducer_name_dict_rule_raises_assertion_error() -> None:
    # Determined (_PyTorchReducerContext.run_cross_slot_reduction): "raise AssertionError(...)"
    # when a reducer wrapped with name= returns a dict, or with name=None returns a non-dict.
    with pytest.raises(AssertionError, match=r"name='acc'.*must return a single \(non-dict\)"):
        fit(_with_reducer(lambda v: {"a": 1, "b": 2}, "acc"))
    with pytest.raises(AssertionError, match=r"name=None.*must return a dict"):
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
    with pytest.raises(RuntimeError, match="disable_dataset_reproducibility_checks"):
        run(PlainLoaderTrial, max_length=pytorch.Batch(2))


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
