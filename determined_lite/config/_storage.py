"""``checkpoint_storage``: Determined's five storage types and their own fields, checked per type
(``storage/_backend.py`` turns a validated section into one fsspec filesystem)."""

from __future__ import annotations

import os
from typing import Any, ClassVar, Dict, Literal, Optional, Tuple

from pydantic import StrictStr, field_validator, model_validator

from determined_lite.config._base import NonNegativeInt, Section
from determined_lite.config._determined import determined_only_fields
from determined_lite.config._errors import FieldError, describe

STORAGE_TYPES = ("shared_fs", "directory", "s3", "gcs", "azure")

# Each storage type's own fields (Determined's names) and the ones it requires.
STORAGE_FIELDS: Dict[str, Tuple[str, ...]] = {
    "shared_fs": ("host_path", "storage_path"),
    "directory": ("container_path",),
    "s3": ("bucket", "prefix", "access_key", "secret_key", "endpoint_url"),
    "gcs": ("bucket", "prefix"),
    "azure": ("container", "connection_string", "account_url", "credential"),
}
_REQUIRED: Dict[str, Tuple[str, ...]] = {
    "directory": ("container_path",),
    "s3": ("bucket",),
    "gcs": ("bucket",),
    "azure": ("container",),
}


class CheckpointStorageConfig(Section):
    """Determined's ``checkpoint_storage``: ``storage/_backend.py`` turns it into one fsspec
    filesystem (the local disk for ``shared_fs`` and ``directory``)."""

    label: ClassVar[str] = "checkpoint_storage"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("checkpoint_storage",)))

    type: Literal["shared_fs", "directory", "s3", "gcs", "azure"] = "shared_fs"
    host_path: Optional[StrictStr] = None
    storage_path: Optional[StrictStr] = None
    container_path: Optional[StrictStr] = None
    bucket: Optional[StrictStr] = None
    prefix: Optional[StrictStr] = None
    access_key: Optional[StrictStr] = None
    secret_key: Optional[StrictStr] = None
    endpoint_url: Optional[StrictStr] = None
    container: Optional[StrictStr] = None
    connection_string: Optional[StrictStr] = None
    account_url: Optional[StrictStr] = None
    credential: Optional[StrictStr] = None
    save_trial_best: NonNegativeInt = 1
    save_trial_latest: NonNegativeInt = 1
    save_experiment_best: NonNegativeInt = 0

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        if value not in STORAGE_TYPES:
            raise ValueError(
                f"expected one of {', '.join(repr(t) for t in STORAGE_TYPES)}, got {describe(value)}"
            )
        return value

    @field_validator("host_path", "container_path")
    @classmethod
    def _host_path(cls, value: str) -> str:
        path = os.path.expanduser(value)
        if not os.path.isabs(path):
            raise ValueError(f"expected an absolute path (or one starting with ~), got {describe(value)}")
        return os.path.normpath(path)

    @model_validator(mode="after")
    def _fields_of_type(self) -> "CheckpointStorageConfig":
        own = STORAGE_FIELDS[self.type]
        for other in sorted({f for fields in STORAGE_FIELDS.values() for f in fields} - set(own)):
            if getattr(self, other) is not None:
                raise FieldError(
                    (other,), f"not a field of type {self.type!r} (its fields: {', '.join(own)})"
                )
        for field in _REQUIRED.get(self.type, ()):
            if not getattr(self, field):
                raise FieldError((field,), f"required for type {self.type!r}")
        if self.type == "azure" and not (self.connection_string or self.account_url):
            raise FieldError(("connection_string",), "type 'azure' needs connection_string or account_url")
        return self

    @model_validator(mode="after")
    def _storage_path(self) -> "CheckpointStorageConfig":
        if self.storage_path is None:
            return self
        if self.host_path is None:
            raise FieldError(("host_path",), "required when storage_path is set")
        full = os.path.normpath(os.path.join(self.host_path, self.storage_path))
        if os.path.commonpath([full, self.host_path]) != self.host_path:
            raise FieldError(
                ("storage_path",),
                "must be a relative directory or a subdirectory of host_path, "
                f"got {describe(self.storage_path)}",
            )
        return self
