"""``Determined``: the SDK's entry object, over det-lite's store instead of a master.

The connection arguments (``master``, ``user``, ...) are accepted and unused: the store of
``$DET_LITE_HOME`` (at the time of each call) is the only "cluster".
"""

from __future__ import annotations

import pathlib
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

from determined_lite.client import _control
from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._enums import ExperimentSortBy, ExperimentState, ModelSortBy, OrderBy
from determined_lite.client._errors import APIException, NotFoundException, deprecated_call, warn_deprecated
from determined_lite.client._experiment import Experiment
from determined_lite.client._model import Model
from determined_lite.client._session import Session
from determined_lite.client._trial import Trial, TrialMetrics, legacy_stream
from determined_lite.store import StoreError

_EXPERIMENT_KEYS = {
    ExperimentSortBy.ID: lambda e: e["id"],
    ExperimentSortBy.START_TIME: lambda e: e["created_at"],
    ExperimentSortBy.END_TIME: lambda e: e["ended_at"] or float("inf"),
    ExperimentSortBy.STATE: lambda e: e["state"],
    ExperimentSortBy.NUM_TRIALS: lambda e: e["num_trials"],
    ExperimentSortBy.NAME: lambda e: e["name"] or "",
}
_MODEL_KEYS = {
    ModelSortBy.NAME: lambda m: m["name"],
    ModelSortBy.DESCRIPTION: lambda m: m["description"],
    ModelSortBy.CREATION_TIME: lambda m: m["created_at"],
    ModelSortBy.LAST_UPDATED_TIME: lambda m: m["updated_at"],
    ModelSortBy.NUM_VERSIONS: lambda m: m["num_versions"],
}


class Determined:
    """The SDK over det-lite's local store (connection arguments accepted, unused)."""

    def __init__(
        self,
        master: Optional[str] = None,
        user: Optional[str] = None,
        password: Optional[str] = None,
        cert_path: Optional[str] = None,
        cert_name: Optional[str] = None,
        noverify: bool = False,
    ) -> None:
        self.master = master

    @property
    def _session(self) -> Session:
        return Session.at()

    # --- experiments --------------------------------------------------------------------------

    def create_experiment(
        self,
        config: Union[str, pathlib.Path, Dict[str, Any]],
        model_dir: Optional[str] = None,
        includes: Optional[Iterable[Union[str, pathlib.Path]]] = None,
        project_id: Optional[int] = None,
        template: Optional[str] = None,
    ) -> Experiment:
        """Create an experiment from ``config`` (a dict or a YAML path) with the code of
        ``model_dir``, and start it in the background (``det-lite experiment create --detach``)."""
        if model_dir is None:
            raise ValueError("det-lite runs the trial code of model_dir: pass the model directory")
        if includes or template:
            raise ValueError("det-lite's create_experiment takes no includes or template")
        experiment_id = _control.create(config, model_dir)
        return self.get_experiment(experiment_id)

    def get_experiment(self, experiment_id: int) -> Experiment:
        """The experiment with this id (``NotFoundException`` if none)."""
        record = self._session.store().experiments.get(int(experiment_id))
        if record is None:
            raise NotFoundException(f"experiment {experiment_id} not found")
        return Experiment.from_record(self._session, record)

    def list_experiments(
        self,
        sort_by: Optional[ExperimentSortBy] = None,
        order_by: Optional[OrderBy] = None,
        experiment_ids: Optional[List[int]] = None,
        labels: Optional[List[str]] = None,
        users: Optional[List[str]] = None,
        states: Optional[List[ExperimentState]] = None,
        name: Optional[str] = None,
        project_id: Optional[int] = None,
    ) -> List[Experiment]:
        """The store's experiments (by id unless ``sort_by``), filtered by ids, states and name
        (a substring); ``labels``, ``users`` and ``project_id`` do not apply locally."""
        records = self._session.store().experiments.list()
        if experiment_ids is not None:
            records = [r for r in records if r["id"] in set(experiment_ids)]
        if states is not None:
            records = [r for r in records if ExperimentState[r["state"]] in set(states)]
        if name:
            records = [r for r in records if name in (r["name"] or "")]
        descending = order_by is not None and order_by.value == OrderBy.DESC.value
        records.sort(key=_EXPERIMENT_KEYS[sort_by or ExperimentSortBy.ID], reverse=descending)
        return [Experiment.from_record(self._session, r) for r in records]

    def get_trial(self, trial_id: int) -> Trial:
        """The trial with this id (``NotFoundException`` if none)."""
        record = self._session.store().trials.get(int(trial_id))
        if record is None:
            raise NotFoundException(f"trial {trial_id} not found")
        return Trial.from_record(self._session, record)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """The checkpoint with this uuid (``NotFoundException`` if none)."""
        record = self._session.store().checkpoints.get(uuid)
        if record is None:
            raise NotFoundException(f"checkpoint {uuid} not found")
        return Checkpoint.from_record(self._session, record)

    def iter_trials_metrics(self, trial_ids: List[int], group: str) -> Iterator[TrialMetrics]:
        """The metric reports of ``group`` of each trial, trial by trial."""
        for trial_id in trial_ids:
            yield from self.get_trial(trial_id).iter_metrics(group)

    def stream_trials_metrics(self, trial_ids: List[int], group: str) -> Iterator[TrialMetrics]:
        """Deprecated in Determined (a ``FutureWarning``): ``iter_trials_metrics``."""
        warn_deprecated(
            "Determined.stream_training_metrics is deprecated.Use Determined.iter_trials_metrics instead",
        )
        return self.iter_trials_metrics(trial_ids, group)

    def stream_trials_training_metrics(self, trial_ids: List[int]) -> Iterator[TrialMetrics]:
        """Deprecated in Determined: the trials' training reports as ``TrainingMetrics``."""
        reports = self.iter_trials_metrics(trial_ids, "training")
        return legacy_stream("Determined.iter_trials_metrics", "training", reports)

    def stream_trials_validation_metrics(self, trial_ids: List[int]) -> Iterator[TrialMetrics]:
        """Deprecated in Determined: the trials' validation reports as ``ValidationMetrics``."""
        reports = self.iter_trials_metrics(trial_ids, "validation")
        return legacy_stream("Determined.iter_trials_metrics", "validation", reports)

    # --- model registry -----------------------------------------------------------------------

    def create_model(
        self,
        name: str,
        description: Optional[str] = "",
        metadata: Optional[Dict[str, Any]] = None,
        labels: Optional[List[str]] = None,
        workspace_name: Optional[str] = None,
    ) -> Model:
        """Add a model to the registry; a name already taken raises Determined's error
        (``determined.common.api.errors.APIException``, status 409)."""
        models = self._session.store().models
        taken = APIException("avoid names equal to other models (case-sensitive)", 409)
        if models.get(name) is not None:
            raise taken
        try:
            record = models.create(name, description or "", metadata, labels)
        except StoreError:
            if models.get(name) is not None:  # another process took the name meanwhile
                raise taken from None
            raise
        return Model.from_record(self._session, record)

    def get_model(self, identifier: Union[str, int]) -> Model:
        """The model with this name (or id, for an int); ``NotFoundException`` if none."""
        record = self._session.store().models.get(identifier)
        if record is None:
            raise NotFoundException(f"model {identifier!r} not found")
        return Model.from_record(self._session, record)

    def get_model_by_id(self, model_id: int) -> Model:
        """Deprecated in Determined (a ``FutureWarning``): ``get_model(model_id)``."""
        warn_deprecated(
            "Determined.get_model_by_id() has been deprecated and will be removed "
            "in a future version.\n"
            "Please call Determined.get_model() with either a string-type name or "
            "an integer-type model ID.",
        )
        return self.get_model(int(model_id))

    def list_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: OrderBy = OrderBy.ASCENDING,
        name: Optional[str] = None,
        description: Optional[str] = None,
        model_id: Optional[int] = None,
        **_filters: Any,
    ) -> List[Model]:
        """The registry's models, sorted; ``name`` and ``description`` filter by substring."""
        records = [
            r
            for r in self._session.store().models.list()
            if (not name or name in r["name"])
            and (not description or description in r["description"])
            and (model_id is None or r["id"] == model_id)
        ]
        records.sort(key=_MODEL_KEYS[sort_by], reverse=order_by.value == OrderBy.DESC.value)
        return [Model.from_record(self._session, r) for r in records]

    def get_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: OrderBy = OrderBy.ASCENDING,
        name: str = "",
        description: str = "",
    ) -> List[Model]:
        """Deprecated in Determined (a ``FutureWarning``): ``list_models``."""
        deprecated_call("Determined.get_models", "Determined.list_models()")
        return self.list_models(sort_by, order_by, name=name, description=description)
