"""``Experiment``: an experiment of the store as Determined's SDK shows it."""

from __future__ import annotations

import os
import pathlib
import sys
import tarfile
import time
from typing import Any, Dict, Iterator, List, Optional, Set

from determined_lite.client import _control
from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._enums import TERMINAL_STATES, ExperimentState, OrderBy, TrialSortBy
from determined_lite.client._errors import APIException, NotFoundException, deprecated_call
from determined_lite.client._session import Session
from determined_lite.client._sorting import SortBy, check_sort_args, sort_checkpoints, top_checkpoint
from determined_lite.client._trial import Trial
from determined_lite.store import Action, NotFoundError, context_snapshot_dir

_TRIAL_KEYS = {
    TrialSortBy.ID: lambda t: t["id"],
    TrialSortBy.START_TIME: lambda t: t["created_at"],
    TrialSortBy.END_TIME: lambda t: t["ended_at"] or float("inf"),
    TrialSortBy.STATE: lambda t: t["state"],
    TrialSortBy.BEST_VALIDATION_METRIC: lambda t: (t["best_validation"] is None, t["best_validation"] or 0.0),
    TrialSortBy.BATCHES_PROCESSED: lambda t: t["total_batches"],
    TrialSortBy.RESTARTS: lambda t: t["restarts"],
}


class Experiment:
    """An experiment of the store. Attributes (cached; ``reload()`` refreshes them): ``id``,
    ``config``, ``state`` (``ExperimentState``), ``name``, ``archived`` (False), ``progress``,
    ``description`` (the config's), ``notes``, ``labels`` (a set; None when empty,
    as Determined gives it)."""

    def __init__(self, experiment_id: int, session: Session) -> None:
        self._id = experiment_id
        self._session = session
        self.config: Optional[Dict[str, Any]] = None
        self.state: Optional[ExperimentState] = None
        self.labels: Optional[Set[str]] = None
        self.archived: Optional[bool] = None
        self.name: Optional[str] = None
        self.progress: Optional[float] = None
        self.description: Optional[str] = None
        self.notes: Optional[str] = None
        self._running = False

    @property
    def id(self) -> int:
        return self._id

    @classmethod
    def from_record(cls, session: Session, record: Dict[str, Any]) -> "Experiment":
        """The experiment of a store record (``store.experiments.get``'s form), without reading it again."""
        made = cls(record["id"], session)
        made._hydrate(record)
        return made

    def _hydrate(self, record: Dict[str, Any]) -> None:
        self.config = record.get("config")
        self.description = (self.config or {}).get("description")
        self.state = ExperimentState[record["state"]]
        self.name = record["name"]
        self.archived = False
        self._running = bool(record["running"])
        annotations = self._session.store().experiments.annotations(self._id) or {}
        self.labels = set(annotations.get("labels") or []) or None
        self.notes = annotations.get("notes", "")

    # --- name, description, labels and notes (Determined's names) ------------------------------

    def set_name(self, name: str) -> None:
        """Set (overwrite) the experiment's name; an empty or blank name is refused, as by
        Determined's master (``APIException``, 400)."""
        if not isinstance(name, str) or not name.strip():
            raise APIException("`name` must not be an empty or whitespace string", 400)
        self._annotate(name=name)
        self.name = name

    def set_description(self, description: str) -> None:
        """Set (overwrite) the experiment's description (the config's ``description``)."""
        self._annotate(description=description)
        self.description = description

    def _annotate(self, **fields: Any) -> None:
        try:
            self._session.store().experiments.set_annotations(self._id, **fields)
        except NotFoundError:
            raise NotFoundException(f"experiment {self._id} not found") from None

    def set_notes(self, notes: str) -> None:
        """Set (overwrite) the experiment's notes."""
        self._annotate(notes=notes)
        self.notes = notes

    def add_label(self, label: str) -> None:
        """Add ``label`` (a label it already has: nothing changes)."""
        self.set_labels((self._stored_labels() | {label}))

    def remove_label(self, label: str) -> None:
        """Remove ``label`` (a label it does not have: nothing changes)."""
        self.set_labels(self._stored_labels() - {label})

    def set_labels(self, labels: Set[str]) -> None:
        """Replace the experiment's labels with ``labels``."""
        self._annotate(labels=sorted(labels))
        self.labels = set(labels) or None

    def _stored_labels(self) -> Set[str]:
        annotations = self._session.store().experiments.annotations(self._id)
        if annotations is None:
            raise NotFoundException(f"experiment {self._id} not found")
        return set(annotations["labels"])

    def reload(self) -> None:
        """Read the experiment again from the store."""
        record = self._session.store().experiments.get(self._id)
        if record is None:
            raise NotFoundException(f"experiment {self._id} not found")
        self._hydrate(record)

    # --- control: the same functions as det-lite experiment pause / kill / activate ------------

    def pause(self) -> None:
        """Pause: the running trials checkpoint and stop at their next scheduling-unit boundary."""
        _control.apply(self._session, self._id, Action.PAUSE)

    def kill(self) -> None:
        """Kill (the experiment ends CANCELED): its trials stop at the next boundary."""
        _control.apply(self._session, self._id, Action.KILL)

    def cancel(self) -> None:
        """As ``kill`` (det-lite keeps no partial work to finish)."""
        self.kill()

    def activate(self) -> None:
        """Resume a PAUSED experiment in the background, from its trials' latest checkpoints."""
        _control.activate(self._session, self._id)

    def delete(self) -> None:
        """Delete the experiment with its checkpoints, TensorBoard files and run directory, as
        ``det-lite experiment delete --yes``. Refused (``APIException``, 400) while it runs or
        while the model registry names one of its checkpoints."""
        from determined_lite.experiment._gc import DeleteRefused, delete_experiment

        store = self._session.store()
        record = store.experiments.get(self._id)
        if record is None:
            raise NotFoundException(f"experiment {self._id} not found")
        try:
            _checkpoints, report = delete_experiment(store, record)
        except DeleteRefused as e:
            raise APIException(str(e), 400) from None
        for problem in report.problems:
            print(f"det-lite: warning: {problem}", file=sys.stderr)

    def download_code(self, output_dir: Optional[str] = None) -> str:
        """Write the experiment's code (its context snapshot) as ``exp-{ID}_model_def.tar.gz``
        to ``output_dir`` (created; default: the current directory), replacing a file of that
        name; returns the archive's path."""
        snapshot = context_snapshot_dir(self._id, self._session.store().home)
        if not os.path.isdir(snapshot):
            raise NotFoundException(f"experiment {self._id} has no code (no context snapshot at {snapshot})")
        name = f"exp-{self.id}_model_def.tar.gz"
        if output_dir:
            directory = pathlib.Path(output_dir).expanduser()
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / name
        else:
            target = pathlib.Path(name)
        with tarfile.open(target, "w:gz") as archive:
            for entry in sorted(os.listdir(snapshot)):
                archive.add(os.path.join(snapshot, entry), arcname=entry)
        return str(target)

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Wait until the experiment ends; returns its state (``ExperimentState.COMPLETED``, ...).
        ``ValueError`` when it is PAUSED (as Determined); ``RuntimeError`` when it is ACTIVE but
        no process runs it (a local runner that died: ``activate()`` resumes it)."""
        waited = 0.0
        while True:
            self.reload()
            if self.state in TERMINAL_STATES:
                assert self.state is not None
                return self.state
            if self.state == ExperimentState.PAUSED:
                raise ValueError(
                    f"Experiment {self.id} is in paused state. Make sure the experiment is active."
                )
            if not self._running:
                raise RuntimeError(
                    f"Experiment {self.id} is ACTIVE but no process runs it (its runner died); "
                    "Experiment.activate() resumes it"
                )
            time.sleep(interval)
            waited += interval
            if waited % 60 == 0:
                print(
                    f"Waiting for Experiment {self.id} to complete. Elapsed {waited / 60} minutes",
                    file=sys.stderr,
                )

    # --- trials and checkpoints ---------------------------------------------------------------

    def list_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: Optional[int] = None,
    ) -> List[Trial]:
        """The experiment's trials, sorted (``limit`` is a page size in Determined: all are returned)."""
        records = sorted(
            self._session.store().trials.list(self._id),
            key=_TRIAL_KEYS[sort_by],
            reverse=order_by.value == OrderBy.DESC.value,
        )
        return [Trial.from_record(self._session, r) for r in records]

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: Optional[int] = None,
    ) -> Iterator[Trial]:
        """``list_trials`` as an iterator."""
        return iter(self.list_trials(sort_by, order_by, limit))

    def get_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> List[Trial]:
        """Deprecated in Determined (a ``FutureWarning``): ``list_trials``."""
        deprecated_call("Experiment.get_trials", "Experiment.list_trials()")
        return self.list_trials(sort_by, order_by)

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """Wait until the experiment has a trial; returns the first one started. ``RuntimeError``
        when the experiment ends before a trial starts (Determined's message)."""
        while True:
            self.reload()
            records = self._session.store().trials.list(self._id)
            if records:
                first = min(records, key=_TRIAL_KEYS[TrialSortBy.START_TIME])
                return Trial.from_record(self._session, first)
            time.sleep(interval)
            if self.state in TERMINAL_STATES:
                raise RuntimeError(
                    "This experiment has terminated before a trial was started."
                    f" Experiment is in state {self.state}."
                )

    def list_checkpoints(
        self,
        sort_by: Optional[SortBy] = None,
        order_by: Optional[OrderBy] = None,
        max_results: Optional[int] = None,
    ) -> List[Checkpoint]:
        """The experiment's COMPLETED checkpoints, sorted by Determined's rules (``_sorting.py``):
        by default by the searcher metric in the searcher's direction."""
        check_sort_args(sort_by, order_by)
        store = self._session.store()
        experiment = store.experiments.get(self._id)
        if experiment is None:
            raise NotFoundException(f"experiment {self._id} not found")
        trials = {t["id"]: t for t in store.trials.list(self._id)}
        checkpoints = [
            Checkpoint.from_record(self._session, r, experiment, trials.get(r["trial_id"]))
            for r in store.checkpoints.list(experiment_id=self._id)
            if r["state"] == "COMPLETED"
        ]
        return sort_checkpoints(checkpoints, sort_by, order_by, experiment["config"], max_results)

    def top_checkpoint(
        self, sort_by: Optional[SortBy] = None, smaller_is_better: Optional[bool] = None
    ) -> Checkpoint:
        """The best checkpoint (``_sorting.top_checkpoint``: Determined's rules and warning)."""
        empty = AssertionError(f"No checkpoints found for experiment {self.id}")
        return top_checkpoint(self, sort_by, smaller_is_better, empty)

    def top_n_checkpoints(
        self, limit: int, sort_by: Optional[str] = None, smaller_is_better: Optional[bool] = None
    ) -> List[Checkpoint]:
        """Deprecated in Determined (a ``FutureWarning``): the best checkpoint of each of the
        ``limit`` best trials, by ``sort_by`` (default: the searcher metric and direction;
        with ``sort_by``, descending unless ``smaller_is_better``). ``AssertionError`` when the
        experiment has no checkpoint."""
        deprecated_call("Experiment.top_n_checkpoints", "Experiment.list_checkpoints(...,max_results=n)")
        order_by = (OrderBy.ASC if smaller_is_better else OrderBy.DESC) if sort_by else None
        ranked = self.list_checkpoints(sort_by=sort_by, order_by=order_by)
        if not ranked:
            raise AssertionError(f"No checkpoint found for experiment {self.id}")
        best: Dict[int, Checkpoint] = {}
        for ckpt in ranked:
            assert ckpt.training is not None
            best.setdefault(ckpt.training.trial_id, ckpt)
        return list(best.values())[:limit]

    def __repr__(self) -> str:
        return f"Experiment(id={self.id})"
