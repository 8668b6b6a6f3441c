"""``Trial`` and ``TrialMetrics``: a trial of the store as Determined's SDK shows it."""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional

from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._enums import CheckpointSortBy, OrderBy, TrialState
from determined_lite.client._errors import NotFoundException, deprecated_call, warn_deprecated
from determined_lite.client._session import Session
from determined_lite.client._sorting import SortBy, check_sort_args, sort_checkpoints, top_checkpoint
from determined_lite.store import TERMINAL_STATES

# The metric groups det-lite records (Determined's names); other groups have no reports.
_GROUPS = {"training": "training_metrics", "validation": "validation_metrics"}


@dataclasses.dataclass
class TrialMetrics:
    """One metrics report of a trial: ``steps_completed`` (batches), ``end_time``, ``metrics``
    and its ``group`` (``"training"`` or ``"validation"``). det-lite does not return either
    per report: ``trial_run_id`` is the trial's restart count and ``end_time`` the time of
    reading."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: datetime.datetime
    metrics: Dict[str, Any]
    group: str
    batch_metrics: Optional[List[Dict[str, Any]]] = None

    @property
    def total_batches(self) -> int:
        """Deprecated in Determined: ``steps_completed``."""
        return self.steps_completed


class TrainingMetrics(TrialMetrics):
    """Deprecated in Determined: a ``TrialMetrics`` of the ``"training"`` group (what
    ``stream_training_metrics`` yields)."""

    def __init__(self, total_batches: Optional[int] = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = "training"
        super().__init__(**kwargs)


class ValidationMetrics(TrialMetrics):
    """Deprecated in Determined: a ``TrialMetrics`` of the ``"validation"`` group."""

    def __init__(self, total_batches: Optional[int] = None, **kwargs: Any) -> None:
        if total_batches is not None:
            kwargs["steps_completed"] = total_batches
        kwargs["group"] = "validation"
        super().__init__(**kwargs)


_LEGACY = {"training": TrainingMetrics, "validation": ValidationMetrics}


def legacy_stream(new: str, group: str, reports: Iterable[TrialMetrics]) -> Iterator[TrialMetrics]:
    """Determined's deprecated ``stream_<group>_metrics`` of ``new`` (``Trial.iter_metrics``, ...):
    its FutureWarning, then ``reports`` as the per-group classes (``TrainingMetrics``, ...)."""
    old = new.replace("iter_", "stream_").replace("metrics", f"{group}_metrics")
    warn_deprecated(f"{old} is deprecated.Use {new} instead with `group` set to '{group}'", 4)
    return _legacy_classes(reports)


def _legacy_classes(reports: Iterable[TrialMetrics]) -> Iterator[TrialMetrics]:
    for m in reports:
        fields = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "group"}
        yield _LEGACY[m.group](**fields)


class Trial:
    """A trial of the store. Attributes (cached; ``reload()`` refreshes them): ``id``,
    ``experiment_id``, ``hparams``, ``state``, ``summary_metrics`` (None: not kept locally)."""

    def __init__(self, trial_id: int, session: Session) -> None:
        self.id = trial_id
        self._session = session
        self.experiment_id: Optional[int] = None
        self.hparams: Optional[Dict[str, Any]] = None
        self.summary_metrics: Optional[Dict[str, Any]] = None
        self.state: Optional[TrialState] = None
        self._record: Dict[str, Any] = {}

    @classmethod
    def from_record(cls, session: Session, record: Dict[str, Any]) -> "Trial":
        """The trial of a store record (``store.trials.get``'s form), without reading it again."""
        made = cls(record["id"], session)
        made._hydrate(record)
        return made

    def _hydrate(self, record: Dict[str, Any]) -> None:
        self._record = record
        self.experiment_id = record["experiment_id"]
        self.hparams = record["hparams"]
        self.state = TrialState[record["state"]]

    def reload(self) -> None:
        """Read the trial again from the store."""
        record = self._session.store().trials.get(self.id)
        if record is None:
            raise NotFoundException(f"trial {self.id} not found")
        self._hydrate(record)

    def _experiment_record(self) -> Dict[str, Any]:
        if self.experiment_id is None:
            self.reload()
        found = self._session.store().experiments.get(int(self.experiment_id))  # type: ignore[arg-type]
        if found is None:
            raise NotFoundException(f"experiment {self.experiment_id} not found")
        return found

    def kill(self) -> None:
        """Kill this trial alone, as Determined's ``Trial.kill()``: its experiment's runner stops
        it within a poll (it ends CANCELED) and the search goes on with the other trials; a trial
        of an experiment that runs no process is CANCELED now. An ended trial stays as it is."""
        self._session.store().requests.kill_trial(self.id)

    def list_checkpoints(
        self,
        sort_by: Optional[SortBy] = None,
        order_by: Optional[OrderBy] = None,
        max_results: Optional[int] = None,
    ) -> List[Checkpoint]:
        """The trial's checkpoints, sorted by Determined's rules (``_sorting.py``): by default
        by the searcher metric in the searcher's direction."""
        check_sort_args(sort_by, order_by)
        experiment = self._experiment_record()
        if not self._record:
            self.reload()
        records = self._session.store().checkpoints.list(trial_id=self.id)
        checkpoints = [Checkpoint.from_record(self._session, r, experiment, self._record) for r in records]
        return sort_checkpoints(checkpoints, sort_by, order_by, experiment["config"], max_results)

    def top_checkpoint(
        self, sort_by: Optional[SortBy] = None, smaller_is_better: Optional[bool] = None
    ) -> Checkpoint:
        """The best checkpoint (``_sorting.top_checkpoint``: Determined's rules and warning)."""
        empty = ValueError("No checkpoints found for criteria.")
        return top_checkpoint(self, sort_by, smaller_is_better, empty)

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The trial's metric reports of ``group`` (``"training"`` or ``"validation"``), by batch."""
        table = _GROUPS.get(group)
        if table is None:
            return iter(())
        store = self._session.store()
        rows = (
            store.metrics.training(self.id)
            if table == "training_metrics"
            else store.metrics.validation(self.id)
        )
        record = store.trials.get(self.id) or {}
        now = datetime.datetime.now(datetime.timezone.utc)
        return (
            TrialMetrics(
                trial_id=self.id,
                trial_run_id=int(record.get("restarts") or 0),
                steps_completed=row["total_batches"],
                end_time=now,
                metrics=row["metrics"],
                group=group,
            )
            for row in rows
        )

    def stream_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """Deprecated in Determined (a ``FutureWarning``, its text): ``iter_metrics``."""
        warn_deprecated(
            "Experiment.stream_metrics() has been deprecated and will be removed in a"
            " future version. Please call Experiment.iter_trials() instead.",
        )
        return self.iter_metrics(group)

    def stream_training_metrics(self) -> Iterator[TrialMetrics]:
        """Deprecated in Determined: ``iter_metrics("training")`` as ``TrainingMetrics``."""
        return legacy_stream("Trial.iter_metrics", "training", self.iter_metrics("training"))

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        """Deprecated in Determined: ``iter_metrics("validation")`` as ``ValidationMetrics``."""
        return legacy_stream("Trial.iter_metrics", "validation", self.iter_metrics("validation"))

    def select_checkpoint(
        self,
        latest: bool = False,
        best: bool = False,
        uuid: Optional[str] = None,
        sort_by: Optional[str] = None,
        smaller_is_better: Optional[bool] = None,
    ) -> Checkpoint:
        """Deprecated in Determined: the latest checkpoint, the best (by ``sort_by`` and
        ``smaller_is_better``, both or neither: default the searcher's), or the one of ``uuid``;
        exactly one of ``latest``, ``best``, ``uuid``."""
        deprecated_call("Trial.select_checkpoint", "Trial.list_checkpoints()")
        if sum([int(latest), int(best), int(uuid is not None)]) != 1:
            raise AssertionError("Exactly one of latest, best, or uuid must be set")
        if (sort_by is None) != (smaller_is_better is None):
            raise AssertionError("sort_by and smaller_is_better must be set together")
        if sort_by is not None and not best:
            raise AssertionError("`sort_by` and `smaller_is_better` parameters can only be used with `best`")
        if uuid:
            record = self._session.store().checkpoints.get(uuid)
            if record is None:
                raise NotFoundException(f"checkpoint {uuid} not found")
            return Checkpoint.from_record(self._session, record)
        key: Optional[SortBy] = CheckpointSortBy.BATCH_NUMBER if latest else sort_by
        order_by = OrderBy.DESC if latest else None
        if sort_by:
            order_by = OrderBy.ASC if smaller_is_better else OrderBy.DESC
        found = self.list_checkpoints(sort_by=key, order_by=order_by, max_results=1)
        if not found:
            raise ValueError("No checkpoints found for criteria.")
        return found[0]

    def get_checkpoints(
        self, sort_by: Optional[SortBy] = None, order_by: Optional[OrderBy] = None
    ) -> List[Checkpoint]:
        """Deprecated in Determined: ``list_checkpoints`` (both or neither of the arguments)."""
        deprecated_call("Trial.get_checkpoints", "Experiment.list_checkpoints()")
        if (sort_by is None) != (order_by is None):
            raise AssertionError("sort_by and order_by must be set together")
        return self.list_checkpoints(sort_by=sort_by, order_by=order_by)

    def iter_logs(
        self, follow: bool = False, *, head: Optional[int] = None, tail: Optional[int] = None, **_filters: Any
    ) -> Iterator[str]:
        """The trial's log lines (each ending with a newline); ``follow`` waits for new ones
        until the trial ends. Determined's other filters are accepted and ignored."""
        if sum(bool(x) for x in (follow, head is not None, tail is not None)) > 1:
            raise ValueError("follow, head and tail are mutually exclusive")
        store = self._session.store()
        after = 0
        while True:
            lines = store.logs.list(trial_id=self.id, after_id=after, tail=tail, limit=head)
            for line in lines:
                after = line["id"]
                yield line["line"] + "\n"
            if not follow:
                return
            record = store.trials.get(self.id)
            if not lines and (record is None or record["state"] in TERMINAL_STATES):
                return
            time.sleep(0.5)

    def logs(self, *args: Any, **kwargs: Any) -> Iterable[str]:
        """Deprecated in Determined (a ``FutureWarning``): ``iter_logs``."""
        deprecated_call("Trial.logs", "Trial.iter_logs()")
        return self.iter_logs(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"
