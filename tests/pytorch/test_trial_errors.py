"""A trial that breaks the PyTorchTrial contract gets an exception of the right type whose message
names the method or metric at fault."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import PyTorchTrialContext, Reducer
from tests.fixtures.reduce_trials import IdBase, IdTrial, batch_ids, fit

_HP7 = {"val_size": 7, "val_batch_size": 3}


# --- train_batch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, type_name",
    [(None, "NoneType"), ([torch.tensor(1.0)], "list"), (1.5, "float"), (np.float64(1.5), "float64")],
)
def test_train_batch_must_return_a_tensor_or_dict(value: Any, type_name: str) -> None:
    class T(IdTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            return value

    with pytest.raises(
        TypeError, match=rf"T\.train_batch\(\) must return a torch\.Tensor .*got {type_name}$"
    ):
        fit(T)


def test_non_numeric_training_metric_names_it() -> None:
    class T(IdTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            return {"loss": torch.tensor(1.0), "bad": object()}

    with pytest.raises(TypeError, match=r"training metric 'bad'"):
        fit(T)


# --- non-serializable metrics ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [object(), [object()], "text", ["a", "b"], None],
    ids=["object", "list-of-object", "str", "list-of-str", "None"],
)
def test_non_numeric_evaluate_batch_metric_names_it(bad: Any) -> None:
    class T(IdTrial):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            return {"fine": 1.0, "bad_metric": bad}

    with pytest.raises(TypeError, match=r"validation metric 'bad_metric'"):
        fit(T)


@pytest.mark.parametrize("training", [False, True])
def test_non_serializable_reducer_result_names_it(training: bool) -> None:
    class T(IdTrial):
        def __init__(self, context: PyTorchTrialContext) -> None:
            super().__init__(context)
            context.wrap_reducer(
                lambda v: object(), name="opaque", for_training=training, for_validation=not training
            )
            context.wrap_reducer(
                lambda v: {"inner": {1, 2}}, name=None, for_training=training, for_validation=not training
            )

    workload = "training" if training else "validation"
    with pytest.raises(TypeError, match=rf"{workload} metric 'opaque' is not JSON-serializable"):
        fit(T)


def test_non_serializable_metric_inside_a_dict_reducer_names_the_key() -> None:
    class T(IdTrial):
        def __init__(self, context: PyTorchTrialContext) -> None:
            super().__init__(context)
            context.wrap_reducer(lambda v: {"ok": 1, "a_set": {1, 2}}, name=None, for_training=False)

    with pytest.raises(TypeError, match=r"validation metric 'a_set' is not JSON-serializable"):
        fit(T)


def test_non_serializable_evaluate_full_dataset_metric_names_it() -> None:
    class T(IdBase):
        def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
            return {"ok": torch.tensor(1.0), "thing": object()}

    with pytest.raises(TypeError, match=r"validation metric 'thing' is not JSON-serializable"):
        fit(T)


# --- evaluate methods -------------------------------------------------------------------------


def test_overriding_both_evaluate_methods() -> None:
    class Both(IdTrial):
        def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match=r"Both must override exactly one of .*; it overrides both"):
        fit(Both)


def test_overriding_neither_evaluate_method() -> None:
    class Neither(IdBase):
        pass

    with pytest.raises(TypeError, match=r"Neither must override exactly one of .*; it overrides neither"):
        fit(Neither)


@pytest.mark.parametrize(
    "value, type_name", [(torch.tensor(1.0), "Tensor"), ([1.0], "list"), (None, "NoneType")]
)
def test_evaluate_batch_must_return_a_dict(value: Any, type_name: str) -> None:
    class T(IdTrial):
        def evaluate_batch(self, batch: Any) -> Any:
            return value

    with pytest.raises(TypeError, match=rf"T\.evaluate_batch\(\) must return a dict .*got {type_name}$"):
        fit(T)


def test_evaluate_full_dataset_must_return_a_dict() -> None:
    class T(IdBase):
        def evaluate_full_dataset(self, data_loader: Any) -> Any:
            return [1.0]

    with pytest.raises(TypeError, match=r"T\.evaluate_full_dataset\(\) must return a dict .*got list$"):
        fit(T)


def test_evaluate_batch_with_batch_idx_gets_the_batch_indices() -> None:
    class T(IdBase):
        def __init__(self, context: PyTorchTrialContext) -> None:
            super().__init__(context)
            self.calls: List[Any] = []

        def evaluate_batch(self, batch: Any, batch_idx: int) -> Dict[str, Any]:
            self.calls.append((batch_idx, batch_ids(batch)))
            return {"idx": float(batch_idx)}

    trial, result = fit(T, _HP7)
    one_pass = [(0, [0, 1, 2]), (1, [3, 4, 5]), (2, [6])]
    assert trial.calls == one_pass * 2
    # AVG of the index weighted by batch length: (0·3 + 1·3 + 2·1) / 7.
    assert [v["metrics"] for v in result.validation_metrics] == [{"idx": 5 / 7}] * 2


def test_old_evaluate_batch_signature_gets_only_the_batch() -> None:
    class T(IdBase):
        def __init__(self, context: PyTorchTrialContext) -> None:
            super().__init__(context)
            self.calls: List[Any] = []

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            self.calls.append(batch_ids(batch))
            return {"n": float(len(batch[0]))}

    trial, _ = fit(T, _HP7)
    assert trial.calls == [[0, 1, 2], [3, 4, 5], [6]] * 2


# --- hparams, apex, callbacks, evaluation_reducer ----------------------------------------------


def test_unknown_hparam_names_it() -> None:
    class T(IdTrial):
        def __init__(self, context: PyTorchTrialContext) -> None:
            super().__init__(context)
            context.get_hparam("learning_rate")

    with pytest.raises(
        ValueError, match=r"hyperparameter 'learning_rate' is not defined.*'global_batch_size'"
    ):
        fit(T)


def test_configure_apex_amp_points_to_wrap_scaler() -> None:
    with pytest.raises(NotImplementedError, match=r"apex.*wrap_scaler"):
        with pytorch.init(hparams={"global_batch_size": 2}, enable_tensorboard_logging=False) as ctx:
            ctx.configure_apex_amp(models=None, optimizers=None)


@pytest.mark.parametrize("value, type_name", [([], "list"), (None, "NoneType"), ("cb", "str")])
def test_build_callbacks_must_return_a_dict(value: Any, type_name: str) -> None:
    class T(IdTrial):
        def build_callbacks(self) -> Any:
            return value

    with pytest.raises(TypeError, match=rf"build_callbacks\(\) must return a dict .*got {type_name}$"):
        fit(T)


@pytest.mark.parametrize(
    "value",
    ["avg", None, {"x2_mean": "sum"}, [Reducer.AVG], {"x2_mean": Reducer.AVG, "other": max}],
    ids=["str", "None", "dict-of-str", "list", "dict-with-function"],
)
def test_evaluation_reducer_must_return_reducers(value: Any) -> None:
    class T(IdTrial):
        def evaluation_reducer(self) -> Any:
            return value

    with pytest.raises(
        TypeError, match=r"evaluation_reducer\(\) must return a determined_lite\.pytorch\.Reducer"
    ):
        fit(T)


# --- metric shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize("as_numpy", [False, True])
def test_validation_metric_changing_shape_between_batches(as_numpy: bool) -> None:
    class T(IdTrial):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            (x,) = batch  # batches of 3, 3, 1 records: the last one has another shape
            return {"scalar": x.mean(), "per_record": x.numpy() if as_numpy else x}

    with pytest.raises(ValueError, match=r"validation metric 'per_record' changes shape between batches"):
        fit(T, _HP7)


def test_validation_metric_mixing_scalar_and_vector() -> None:
    class T(IdTrial):
        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            (x,) = batch
            return {"m": x.sum() if len(x) == 3 else [1.0, 2.0]}

    with pytest.raises(ValueError, match=r"validation metric 'm' changes shape between batches"):
        fit(T, _HP7)


def test_training_metric_changing_shape_between_batches() -> None:
    class T(IdTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            return {"loss": torch.tensor(1.0), "grow": torch.zeros(batch_idx + 1)}

    with pytest.raises(ValueError, match=r"training metric 'grow' changes shape between batches"):
        fit(T)
