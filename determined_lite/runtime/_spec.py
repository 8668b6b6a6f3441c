"""What a trial's workers are asked to do, and what the chief reports back: plain JSON files."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Type, TypeVar

from determined_lite._enums import TextEnum
from determined_lite._progress import write_json_atomic
from determined_lite.config import TrainingSettings
from determined_lite.config._plugins import ENGINES, SINGLE_ENGINE
from determined_lite.store._paths import make_private_dirs

BACKENDS = (SINGLE_ENGINE, *ENGINES)  # a worker spec's backend: one process, or an engine
R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """A dataclass in a JSON file, written whole (renamed into place) in a private directory made
    if missing, 0600, not fsynced: a run's spec and result are messages between the runner and
    its live workers, written anew for every run; after a crash, the store and the checkpoints
    (fsynced) are what resumes."""

    def save(self, path: str) -> str:
        make_private_dirs(os.path.dirname(os.path.abspath(path)))
        # Fields as they are: dataclasses.asdict deep-copies every nested dict of the config
        # first (~0.2 ms a run); the JSON written is the same.
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        write_json_atomic(path, {f.name: getattr(self, f.name) for f in fields})
        return path

    @classmethod
    def load(cls: Type[R], path: str) -> R:
        with open(path) as f:
            return cls(**json.load(f))


@dataclasses.dataclass
class WorkerSpec(JsonRecord):
    """Everything a worker process needs to run (or resume) one trial; written as JSON.

    ``max_length`` is the total length to reach, in Determined's form (``{"batches": n}``);
    ``settings`` is the experiment's ``TrainingSettings.to_json()`` (periods, checkpoint policy,
    searcher metric), built once by the runner: workers read it instead of parsing ``exp_conf``;
    ``latest_checkpoint`` is the directory to resume from; ``warm_start`` the checkpoint a trial
    without one starts from (``searcher.source_checkpoint_uuid``/``source_trial_id``).
    ``store_path``, when set, makes the chief write metrics, checkpoints and state to the
    experiment store and poll it for pause/kill requests.
    """

    entrypoint: str
    context_dir: str
    exp_conf: Dict[str, Any]
    hparams: Dict[str, Any]
    result_path: str
    max_length: Dict[str, int]
    trial_seed: int
    settings: Dict[str, Any]
    trial_id: Optional[int] = None
    experiment_id: Optional[int] = None
    latest_checkpoint: Optional[str] = None
    warm_start: Optional[str] = None
    test_mode: bool = False
    store_path: Optional[str] = None
    checkpoint_root: Optional[str] = None
    tensorboard_path: Optional[str] = None
    backend: str = SINGLE_ENGINE
    slots: int = 1
    ask_next_op: bool = False  # the chief asks the runner for more at max_length (_next_op.py)
    wake_path: Optional[str] = None  # the runner's FIFO: the chief announces a question there

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")

    def training_settings(self) -> TrainingSettings:
        """The experiment config's training fields (periods, policy, searcher metric)."""
        return TrainingSettings.from_json(self.settings)


class WorkerStatus(TextEnum):
    """How a trial's run ended (``WorkerResult.status``, the text in ``result.json``)."""

    COMPLETED = "completed"  # reached max_length
    STOPPED = "stopped"  # a pause/kill request, or the trial asked to stop
    INVALID_HP = "invalid_hp"  # the trial raised InvalidHP
    ERROR = "error"


@dataclasses.dataclass
class WorkerResult(JsonRecord):
    """What the chief worker reports when it exits; ``status`` is a ``WorkerStatus`` value.

    ``action_required``: set (with status ``error``) when the trial stopped on an error that the
    user must fix first, e.g. a full disk (``determined_lite._errors.ActionRequired``): the
    runner pauses the experiment instead of restarting the trial. Any worker that meets such an
    error writes it, not only the chief.
    """

    status: str
    total_batches: int = 0
    best_validation: Optional[float] = None
    validation_metrics: Optional[Dict[str, Any]] = None  # the last validation
    checkpoints: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    action_required: Optional[str] = None

    @property
    def latest_checkpoint(self) -> Optional[Dict[str, Any]]:
        return self.checkpoints[-1] if self.checkpoints else None

    @classmethod
    def after_exit(cls, path: str, code: int) -> "WorkerResult":
        """The result at ``path`` once the workers exited with ``code``: an ``error`` when they
        failed (whatever the chief reported) or wrote no result."""
        if not os.path.exists(path):
            return cls(status=WorkerStatus.ERROR, error=f"workers exited with status {code} before reporting")
        result = cls.load(path)
        if code != 0 and result.status != WorkerStatus.ERROR:
            result.status = WorkerStatus.ERROR
            result.error = result.error or f"workers exited with status {code}"
        return result


def progress_path(result_path: str) -> str:
    """Where the chief reports its ``TrialProgress`` (``_progress.py``) for the runner's progress bar."""
    return result_path + ".progress"
