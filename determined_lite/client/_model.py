"""The model registry: ``Model`` and ``ModelVersion``, kept in det-lite's store."""

from __future__ import annotations

import datetime
from typing import Any, Dict, Iterator, List, Optional

from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._enums import OrderBy
from determined_lite.client._errors import NotFoundException, deprecated_call
from determined_lite.client._session import Session


def _time(timestamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)


class ModelVersion:
    """A checkpoint registered as a model's version (1, 2, ...). Attributes: ``model_name``,
    ``model_version``, ``model_id``, ``checkpoint``, ``metadata``, ``name``, ``notes``, ``comment``."""

    def __init__(self, session: Session, model_version: int, model_name: str) -> None:
        self._session = session
        self.model_name = model_name
        self.model_version = model_version
        self.model_id: Optional[int] = None
        self.checkpoint: Optional[Checkpoint] = None
        self.metadata: Optional[Dict[str, Any]] = None
        self.name: Optional[str] = None
        self.comment: Optional[str] = None
        self.notes: Optional[str] = None

    @classmethod
    def from_record(cls, session: Session, record: Dict[str, Any]) -> "ModelVersion":
        """The version of a store record (``store.models.get_version``'s form)."""
        version = cls(session, record["version"], record["model_name"])
        version._hydrate(record)
        return version

    def _hydrate(self, record: Dict[str, Any]) -> None:
        found = self._session.store().checkpoints.get(record["checkpoint_uuid"])
        if found is None:
            self.checkpoint = Checkpoint(self._session, record["checkpoint_uuid"])
        else:
            self.checkpoint = Checkpoint.from_record(self._session, found)
        self.model_id = record["model_id"]
        self.metadata = record["metadata"] or {}
        self.name = record["name"]
        self.notes = record["notes"] or ""
        self.comment = ""

    def reload(self) -> None:
        """Read the version again from the store."""
        record = self._session.store().models.get_version(self.model_name, self.model_version)
        if record is None:
            raise NotFoundException(f"model {self.model_name!r} has no version {self.model_version}")
        self._hydrate(record)

    def _update(self, **fields: Any) -> None:
        record = self._session.store().models.update_version(self.model_name, self.model_version, **fields)
        self._hydrate(record)

    def set_name(self, name: str) -> None:
        """Name this version."""
        self._update(name=name)

    def set_notes(self, notes: str) -> None:
        """Set this version's notes."""
        self._update(notes=notes)

    def get_metrics(self, group: Optional[str] = None) -> Iterator[Any]:
        """Deprecated in Determined (a ``FutureWarning``): ``iter_metrics``."""
        deprecated_call("Model.get_metrics", "Model.iter_metrics()")
        return self.iter_metrics(group=group)

    def iter_metrics(self, group: Optional[str] = None) -> Iterator[Any]:
        """Determined's metrics of the tasks that reported using this version
        (``report_task_using_model_version``): det-lite records none, so there are none."""
        return iter(())

    def delete(self) -> None:
        """Remove this version from the registry (its checkpoint stays)."""
        self._session.store().models.delete_version(self.model_name, self.model_version)

    def __repr__(self) -> str:
        return f"ModelVersion(model_name={self.model_name}, model_version={self.model_version})"


class Model:
    """A model of the registry. Attributes: ``name``, ``model_id``, ``description``,
    ``creation_time``, ``last_updated_time``, ``metadata``, ``labels``, ``archived``."""

    def __init__(self, session: Session, name: str) -> None:
        self._session = session
        self.name = name
        self.model_id: Optional[int] = None
        self.description: Optional[str] = None
        self.creation_time: Optional[datetime.datetime] = None
        self.last_updated_time: Optional[datetime.datetime] = None
        self.metadata: Optional[Dict[str, Any]] = None
        self.labels: Optional[List[str]] = None
        self.username: Optional[str] = None
        self.workspace_id: Optional[int] = None
        self.archived: Optional[bool] = None

    @classmethod
    def from_record(cls, session: Session, record: Dict[str, Any]) -> "Model":
        """The model of a store record (``store.models.get``'s form)."""
        model = cls(session, record["name"])
        model._hydrate(record)
        return model

    def _hydrate(self, record: Dict[str, Any]) -> None:
        self.model_id = record["id"]
        self.description = record["description"] or ""
        self.creation_time = _time(record["created_at"])
        self.last_updated_time = _time(record["updated_at"])
        self.metadata = record["metadata"] or {}
        self.labels = list(record["labels"] or [])
        self.username = ""
        self.archived = record["archived"]

    def reload(self) -> None:
        """Read the model again from the store."""
        record = self._session.store().models.get(self.name)
        if record is None:
            raise NotFoundException(f"model {self.name!r} not found")
        self._hydrate(record)

    def _update(self, **fields: Any) -> None:
        self._hydrate(self._session.store().models.update(self.name, **fields))

    def get_version(self, version: int = -1) -> Optional[ModelVersion]:
        """Version ``version``; -1 (default): the latest, None when there is none. A missing
        version number raises ``NotFoundException``."""
        record = self._session.store().models.get_version(self.name, version)
        if record is None:
            if version == -1:
                return None
            raise NotFoundException(f"model {self.name!r} has no version {version}")
        return ModelVersion.from_record(self._session, record)

    def list_versions(self, order_by: OrderBy = OrderBy.DESC) -> List[ModelVersion]:
        """The model's versions by number (newest first by default)."""
        descending = order_by.value == OrderBy.DESC.value
        records = self._session.store().models.list_versions(self.name, descending=descending)
        return [ModelVersion.from_record(self._session, r) for r in records]

    def get_versions(self, order_by: OrderBy = OrderBy.DESC) -> List[ModelVersion]:
        """Deprecated in Determined (a ``FutureWarning``): ``list_versions``."""
        deprecated_call("Model.get_versions", "Model.list_versions()")
        return self.list_versions(order_by)

    def register_version(self, checkpoint_uuid: str) -> ModelVersion:
        """Register the checkpoint as the model's next version."""
        record = self._session.store().models.add_version(self.name, checkpoint_uuid)
        return ModelVersion.from_record(self._session, record)

    def add_metadata(self, metadata: Dict[str, Any]) -> None:
        """Merge ``metadata`` into the model's (its keys replace existing ones)."""
        self._update(metadata=dict(self.metadata, **metadata) if self.metadata else dict(metadata))

    def remove_metadata(self, keys: List[str]) -> None:
        """Remove these top-level keys from the model's metadata."""
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"remove_metadata() requires a list of strings as input but got: {keys}")
        self._update(metadata={k: v for k, v in (self.metadata or {}).items() if k not in keys})

    def set_labels(self, labels: List[str]) -> None:
        """Replace the model's labels."""
        if isinstance(labels, str) or not all(isinstance(k, str) for k in labels):
            raise ValueError(f"set_labels() requires a list of strings as input but got: {labels}")
        self._update(labels=list(labels))

    def set_description(self, description: str) -> None:
        """Replace the model's description."""
        self._update(description=description)

    def archive(self) -> None:
        """Mark the model archived."""
        self._update(archived=1)

    def unarchive(self) -> None:
        """Clear the archived mark."""
        self._update(archived=0)

    def delete(self) -> None:
        """Remove the model and its versions from the registry (their checkpoints stay)."""
        self._session.store().models.delete(self.name)

    def __repr__(self) -> str:
        return f"Model(id={self.model_id}, name={self.name}, metadata={self.metadata})"
