"""A plain-Python ``Trainer.fit`` recorded in the store: a ``local`` experiment with one trial.

So that ``det-lite checkpoint list`` shows its checkpoints, ``det-lite experiment describe`` its
metrics, and the ``checkpoint_storage`` retention policy of its ``exp_conf`` (Determined's
defaults otherwise: the best and the latest checkpoint) removes the checkpoints it no longer
keeps, as for any experiment; ``checkpoint gc`` knows its files. ``pause`` and ``kill`` from
another terminal stop it at the next report with a checkpoint. Only Python resumes it
(``fit(latest_checkpoint=...)``): ``experiment activate`` refuses a local run.

The record is made by the chief only, when ``fit`` starts; a store that cannot be written
costs one warning and no recording, never the training.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional

from determined_lite.reporting._reporter import TrialReporter, stop_requested
from determined_lite.reporting._retention import RetentionPolicy, apply_retention
from determined_lite.store import (
    Action,
    ExperimentKind,
    ExperimentState,
    Store,
    StoreError,
    TrialState,
)

logger = logging.getLogger("determined_lite")

LOCAL_REQUEST_ID = "local"


def _plain(value: Any) -> Any:
    """``value`` as JSON values (numpy and tensors by value, anything else by its repr)."""

    def default(obj: Any) -> Any:
        for attr in ("tolist", "item"):
            method = getattr(obj, attr, None)
            if callable(method):
                return method()
        return repr(obj)

    return json.loads(json.dumps(value, default=default, allow_nan=True))


def _recorded_config(exp_conf: Dict[str, Any], checkpoint_root: str) -> Dict[str, Any]:
    """``exp_conf`` as the store keeps it, naming where the checkpoints went (``checkpoint gc``
    reads the root from the config, as for experiments): a plain-Python fit keeps its
    checkpoints in that directory whatever storage type ``exp_conf`` names (no secret is kept)."""
    config = _plain(exp_conf)
    storage = config.get("checkpoint_storage") or {}
    kept = {k: v for k, v in storage.items() if k.startswith("save_")}
    config["checkpoint_storage"] = {**kept, "type": "shared_fs", "host_path": checkpoint_root}
    return config


class LocalRun:
    """One ``Trainer.fit`` on the chief, as a ``local`` experiment of the default store."""

    def __init__(self, store: Store, experiment_id: int, trial_id: int, retention: RetentionPolicy) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.trial_id = trial_id
        self.retention = retention

    @property
    def store_path(self) -> str:
        return os.path.realpath(self.store.path)

    @classmethod
    def record(
        cls,
        *,
        name: str,
        exp_conf: Dict[str, Any],
        hparams: Dict[str, Any],
        seed: int,
        context_dir: Optional[str],
        checkpoint_root: str,
        metric: Optional[str],
        smaller_is_better: bool,
    ) -> Optional["LocalRun"]:
        """Record the run (ACTIVE, run by this process); None, with a warning, when the store
        cannot be written."""
        try:
            store = Store()
            experiment_id = store.experiments.create(
                _recorded_config(exp_conf, checkpoint_root),
                context_dir,
                None,
                name=name,
                pid=os.getpid(),
                kind=ExperimentKind.LOCAL,
            )
            trial_id = store.trials.create(experiment_id, LOCAL_REQUEST_ID, _plain(hparams), seed)
        except (StoreError, OSError) as e:
            logger.warning(
                "this run is not recorded in the det-lite store (%s): `det-lite checkpoint list` "
                "will not show its checkpoints and no retention policy removes them",
                e,
            )
            return None
        retention = RetentionPolicy.from_config(exp_conf, metric, smaller_is_better)
        return cls(store, experiment_id, trial_id, retention)

    def reporter(self, metric: Optional[str], smaller_is_better: bool) -> TrialReporter:
        """The chief's writer of this run's metrics and checkpoints (retention applied)."""
        return TrialReporter(
            self.store, self.trial_id, self.experiment_id, self.retention, metric, smaller_is_better
        )

    def should_stop(self) -> bool:
        return stop_requested(self.store, self.experiment_id)

    def finish(
        self, stopped_early: bool, error: Optional[BaseException], paused: bool = False
    ) -> ExperimentState:
        """Record how the run ended and apply the retention policy; returns the state.

        Completed (or stopped by the trial itself): COMPLETED. Stopped by ``kill``: CANCELED.
        Stopped by ``pause`` or Ctrl-C (``paused``; the second Ctrl-C's ``KeyboardInterrupt``
        too), as the CLI's runner does: PAUSED (it keeps its latest checkpoint to resume from
        Python). An error: ERROR.
        """
        action = self.store.requests.pending(self.experiment_id)
        if isinstance(error, KeyboardInterrupt):
            state = ExperimentState.PAUSED
        elif error is not None:
            state = ExperimentState.ERROR
        elif stopped_early and (paused or action == Action.PAUSE):
            state = ExperimentState.PAUSED
        elif stopped_early and action == Action.KILL:
            state = ExperimentState.CANCELED
        else:
            state = ExperimentState.COMPLETED
        trial_state = TrialState(state.value)
        self.store.trials.update(self.trial_id, state=trial_state)
        unfinished = [self.trial_id] if state == ExperimentState.PAUSED else []
        apply_retention(self.store, self.experiment_id, self.retention, unfinished)
        self.store.experiments.set_state(self.experiment_id, state)
        self.store.requests.clear(self.experiment_id)
        self.store.experiments.set_pid(self.experiment_id, None)
        return state
