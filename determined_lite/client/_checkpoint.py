"""``Checkpoint``: one checkpoint of the store, as Determined's SDK shows it.

``download()`` copies the checkpoint directory (det-lite's checkpoints are local directories;
Determined fetches them from checkpoint storage or through the master). User metadata lives in
the store: ``add_metadata``/``remove_metadata`` change it there and, as in Determined, not in
the checkpoint's own ``metadata.json``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
from typing import Any, Dict, Iterator, List, Optional

from determined_lite.client._enums import CheckpointState, DownloadMode
from determined_lite.client._errors import NotFoundException
from determined_lite.client._session import Session
from determined_lite.reporting._retention import remove_checkpoint_dir
from determined_lite.storage import read_metadata_file


@dataclasses.dataclass
class CheckpointTrainingMetadata:
    """What trained the checkpoint: its experiment (config, id), trial (id, hparams) and the
    validation metrics at its batch (``{"avgMetrics": {...}}``, Determined's shape)."""

    experiment_config: Dict[str, Any]
    experiment_id: int
    trial_id: int
    hparams: Dict[str, Any]
    validation_metrics: Dict[str, Any]


def _iso(timestamp: Optional[float]) -> Optional[str]:
    if timestamp is None:
        return None
    when = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return when.isoformat().replace("+00:00", "Z")


def _resources(path: str) -> Dict[str, int]:
    """Relative file path -> size in bytes, for every file of the checkpoint directory."""
    sizes: Dict[str, int] = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                sizes[os.path.relpath(full, path)] = os.path.getsize(full)
            except OSError:
                continue
    return sizes


class Checkpoint:
    """A checkpoint of the store. Attributes (cached; ``reload()`` refreshes them): ``uuid``,
    ``report_time``, ``resources``, ``metadata``, ``state``, ``training``; and det-lite's
    ``path`` (its directory) and ``steps_completed`` (its batch)."""

    def __init__(self, session: Session, uuid: str) -> None:
        self._session = session
        self.uuid = uuid
        self.task_id: Optional[str] = None
        self.allocation_id: Optional[str] = None
        self.report_time: Optional[str] = None
        self.resources: Optional[Dict[str, Any]] = None
        self.metadata: Optional[Dict[str, Any]] = None
        self.state: Optional[CheckpointState] = None
        self.training: Optional[CheckpointTrainingMetadata] = None
        self.path: Optional[str] = None
        self.steps_completed: Optional[int] = None

    @classmethod
    def from_record(
        cls,
        session: Session,
        record: Dict[str, Any],
        experiment: Optional[Dict[str, Any]] = None,
        trial: Optional[Dict[str, Any]] = None,
    ) -> "Checkpoint":
        """The checkpoint of a store record (``store.checkpoints.get``'s form); ``experiment`` and
        ``trial``: its experiment's and trial's records when the caller has them."""
        ckpt = cls(session, record["uuid"])
        ckpt._hydrate(record, experiment, trial)
        return ckpt

    def _hydrate(
        self, record: Dict[str, Any], experiment: Optional[Dict[str, Any]], trial: Optional[Dict[str, Any]]
    ) -> None:
        store = self._session.store()
        experiment = experiment or store.experiments.get(record["experiment_id"]) or {}
        trial = trial or store.trials.get(record["trial_id"]) or {}
        self.path = record["path"]
        self.steps_completed = record["total_batches"]
        self.report_time = _iso(record["created_at"])
        self.state = CheckpointState[record["state"]]
        self.resources = _resources(record["path"])
        stored = self._session.store().checkpoints.metadata(self.uuid)
        self.metadata = stored if stored is not None else read_metadata_file(record["path"]) or {}
        self.training = CheckpointTrainingMetadata(
            experiment_config=experiment.get("config") or {},
            experiment_id=record["experiment_id"],
            trial_id=record["trial_id"],
            hparams=trial.get("hparams") or {},
            validation_metrics={"avgMetrics": dict(record["metrics"] or {})},
        )

    def reload(self) -> None:
        """Read the checkpoint again from the store."""
        record = self._session.store().checkpoints.get(self.uuid)
        if record is None:
            raise NotFoundException(f"checkpoint {self.uuid} not found")
        self._hydrate(record, None, None)

    def download(self, path: Optional[str] = None, mode: DownloadMode = DownloadMode.AUTO) -> str:
        """Copy the checkpoint to ``path`` (default ``checkpoints/<uuid>`` under the current
        directory) and return that directory; a directory that already holds a checkpoint
        (``metadata.json`` or ``MLmodel``) is returned as it is. ``mode`` is accepted: every
        mode copies locally. Links in the checkpoint are copied as links, its linked code as
        files; a stored name or link that would land outside ``path`` is refused
        (``storage.UnsafeNameError``) before anything is written."""
        if self.state is None:
            self.reload()
        if self.state not in (CheckpointState.COMPLETED, CheckpointState.PARTIALLY_DELETED):
            raise ValueError(f"only COMPLETED checkpoints can be downloaded; {self.uuid} is {self.state}")
        target = pathlib.Path(path) if path is not None else pathlib.Path("checkpoints", self.uuid)
        if not any(target.joinpath(f).exists() for f in ("metadata.json", "MLmodel")):
            source = self.path or ""
            record = self._session.store().checkpoints.get(self.uuid)
            from determined_lite.storage import copy_checkpoint, fetch_checkpoint

            if record is not None and not os.path.isdir(source):  # a cloud store's: fetched
                source = fetch_checkpoint(self._session.store(), record)
            if not os.path.isdir(source):
                raise FileNotFoundError(
                    f"checkpoint {self.uuid}: its directory {source} is gone (deleted by retention, "
                    "`det-lite checkpoint gc` or `experiment delete`?)"
                )
            copy_checkpoint(source, str(target))  # links inside stay links; none may leave it
        if not target.joinpath("metadata.json").exists():
            self.write_metadata_file(str(target.joinpath("metadata.json")))
        return str(target)

    def get_metrics(self, group: Optional[str] = None) -> Iterator[Any]:
        """Determined's metrics of the tasks that reported using this checkpoint
        (``core_context.experimental.report_task_using_checkpoint``, for inference): det-lite
        records no such task, so there are none (an empty iterator, as Determined gives for a
        checkpoint no task used). The trial's own metrics: ``Trial.iter_metrics``."""
        return iter(())

    def write_metadata_file(self, path: str) -> None:
        """Write this checkpoint's metadata as JSON to ``path``."""
        with open(path, "w") as f:
            json.dump(self.metadata, f, indent=2)

    def add_metadata(self, metadata: Dict[str, Any]) -> None:
        """Merge ``metadata`` (JSON-serializable) into the checkpoint's; its keys replace
        existing ones. Stored in det-lite's store, not in the checkpoint directory."""
        updated = dict(self.metadata, **metadata) if self.metadata else dict(metadata)
        self._session.store().checkpoints.set_metadata(self.uuid, updated)
        self.metadata = updated

    def remove_metadata(self, keys: List[str]) -> None:
        """Remove these top-level keys from the checkpoint's metadata."""
        updated = dict(self.metadata) if self.metadata else {}
        for key in keys:
            updated.pop(key, None)
        self._session.store().checkpoints.set_metadata(self.uuid, updated)
        self.metadata = updated

    def delete(self) -> None:
        """Delete the checkpoint: forgotten by the store, its directory removed (Determined's
        master deletes it asynchronously; det-lite at once). ``NotFoundException`` when unknown; a
        ``ValueError`` when a model version names it (Determined's master refuses it too)."""
        store = self._session.store()
        record = store.checkpoints.get(self.uuid)
        if record is None:
            raise NotFoundException(f"checkpoint {self.uuid} not found")
        registered = store.checkpoints.registered(record["experiment_id"]).get(self.uuid)
        if registered:
            raise ValueError(
                f"checkpoint {self.uuid} is in the model registry ({registered}) and cannot be "
                "deleted: delete that model version first"
            )
        store.checkpoints.delete(self.uuid)
        remove_checkpoint_dir(record)
        self.state = CheckpointState.DELETED

    def __repr__(self) -> str:
        if self.training is not None:
            return f"Checkpoint(uuid={self.uuid}, task_id={self.task_id}, trial_id={self.training.trial_id})"
        return f"Checkpoint(uuid={self.uuid}, task_id={self.task_id})"
