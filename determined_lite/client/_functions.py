"""The module-level functions of Determined's ``determined.experimental.client``: the methods of
one ``Determined`` object (which reads ``$DET_LITE_HOME``'s store at each call), bound here so
each signature is written once, on the method."""

from __future__ import annotations

from typing import Any, Iterator, List

from determined_lite.client._determined import Determined
from determined_lite.client._errors import warn_deprecated
from determined_lite.client._trial import TrialMetrics

_determined = Determined()


def login(*args: Any, **kwargs: Any) -> None:
    """Accepted and does nothing (Determined's master, user, password, cert_path, cert_name,
    noverify): det-lite's store needs no master and no user."""


create_experiment = _determined.create_experiment
get_experiment = _determined.get_experiment
list_experiments = _determined.list_experiments
get_trial = _determined.get_trial
get_checkpoint = _determined.get_checkpoint
iter_trials_metrics = _determined.iter_trials_metrics
stream_trials_training_metrics = _determined.stream_trials_training_metrics
stream_trials_validation_metrics = _determined.stream_trials_validation_metrics
create_model = _determined.create_model
get_model = _determined.get_model
get_model_by_id = _determined.get_model_by_id
list_models = _determined.list_models
get_models = _determined.get_models


def stream_trials_metrics(trial_ids: List[int], group: str) -> Iterator[TrialMetrics]:
    """Deprecated in Determined (a ``FutureWarning``, the module function's own text):
    ``iter_trials_metrics``."""
    warn_deprecated("client.stream_trials_metrics is deprecated. Use client.iter_trials_metrics instead")
    return iter_trials_metrics(trial_ids, group=group)
