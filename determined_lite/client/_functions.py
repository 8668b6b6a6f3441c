"""The module-level functions of Determined's ``determined.experimental.client``, over one
``Determined`` object (which reads ``$DET_LITE_HOME``'s store at each call)."""

from __future__ import annotations

import pathlib
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._determined import Determined
from determined_lite.client._enums import ExperimentSortBy, ExperimentState, ModelSortBy, OrderBy
from determined_lite.client._experiment import Experiment
from determined_lite.client._model import Model
from determined_lite.client._trial import Trial, TrialMetrics

_determined = Determined()


def login(
    master: Optional[str] = None,
    user: Optional[str] = None,
    password: Optional[str] = None,
    cert_path: Optional[str] = None,
    cert_name: Optional[str] = None,
    noverify: bool = False,
) -> None:
    """Accepted and does nothing: det-lite's store needs no master and no user."""


def create_experiment(
    config: Union[str, pathlib.Path, Dict[str, Any]],
    model_dir: Optional[str] = None,
    includes: Optional[Iterable[Union[str, pathlib.Path]]] = None,
    project_id: Optional[int] = None,
    template: Optional[str] = None,
) -> Experiment:
    """Create an experiment and start it in the background (``Determined.create_experiment``)."""
    return _determined.create_experiment(config, model_dir, includes, project_id, template)


def get_experiment(experiment_id: int) -> Experiment:
    """The experiment with this id."""
    return _determined.get_experiment(experiment_id)


def list_experiments(
    sort_by: Optional[ExperimentSortBy] = None,
    order_by: Optional[OrderBy] = None,
    experiment_ids: Optional[List[int]] = None,
    labels: Optional[List[str]] = None,
    users: Optional[List[str]] = None,
    states: Optional[List[ExperimentState]] = None,
    name: Optional[str] = None,
    project_id: Optional[int] = None,
) -> List[Experiment]:
    """The store's experiments (``Determined.list_experiments``)."""
    return _determined.list_experiments(
        sort_by, order_by, experiment_ids, labels, users, states, name, project_id
    )


def get_trial(trial_id: int) -> Trial:
    """The trial with this id."""
    return _determined.get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    """The checkpoint with this uuid."""
    return _determined.get_checkpoint(uuid)


def create_model(
    name: str, description: Optional[str] = "", metadata: Optional[Dict[str, Any]] = None
) -> Model:
    """Add a model to the registry."""
    return _determined.create_model(name, description, metadata)


def get_model(identifier: Union[str, int]) -> Model:
    """The model with this name (or id)."""
    return _determined.get_model(identifier)


def get_model_by_id(model_id: int) -> Model:
    """The model with this id."""
    return _determined.get_model_by_id(model_id)


def list_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: OrderBy = OrderBy.ASCENDING,
    name: Optional[str] = None,
    description: Optional[str] = None,
    model_id: Optional[int] = None,
    **filters: Any,
) -> List[Model]:
    """The registry's models (``Determined.list_models``)."""
    return _determined.list_models(sort_by, order_by, name, description, model_id, **filters)


def get_models(
    sort_by: ModelSortBy = ModelSortBy.NAME,
    order_by: OrderBy = OrderBy.ASCENDING,
    name: str = "",
    description: str = "",
) -> List[Model]:
    """Deprecated in Determined: ``list_models``."""
    return _determined.get_models(sort_by, order_by, name, description)


def iter_trials_metrics(trial_ids: List[int], group: str) -> Iterator[TrialMetrics]:
    """The metric reports of ``group`` of these trials."""
    return _determined.iter_trials_metrics(trial_ids, group)


def stream_trials_metrics(trial_ids: List[int], group: str) -> Iterator[TrialMetrics]:
    """Deprecated in Determined: ``iter_trials_metrics``."""
    return _determined.iter_trials_metrics(trial_ids, group)
