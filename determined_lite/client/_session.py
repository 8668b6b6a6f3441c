"""Where the SDK's objects read and write: det-lite's store, in place of Determined's master."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

from determined_lite.store import ModelRegistry, Store, default_db_path

_lock = threading.Lock()
_opened: Dict[Tuple[str, str], object] = {}


@dataclasses.dataclass(frozen=True)
class Session:
    """The store file the SDK's objects use; ``db_path`` None: ``$DET_LITE_HOME/det-lite.db``,
    resolved when the session is made (``Determined()`` makes one per call without a path)."""

    db_path: str

    @classmethod
    def at(cls, db_path: Optional[str] = None) -> "Session":
        return cls(os.path.abspath(os.path.expanduser(db_path or default_db_path())))

    def store(self) -> Store:
        """The store (one object per file and process, safe across threads)."""
        return self._open("store")  # type: ignore[return-value]

    def registry(self) -> ModelRegistry:
        """The model registry and checkpoint metadata of the same file."""
        return self._open("registry")  # type: ignore[return-value]

    def _open(self, kind: str) -> object:
        key = (kind, self.db_path)
        with _lock:
            found = _opened.get(key)
            if found is None:
                found = Store(self.db_path) if kind == "store" else ModelRegistry(self.db_path)
                _opened[key] = found
            return found


_R = TypeVar("_R", bound="FromRecord")


class FromRecord:
    """An SDK object (experiment, trial) made from its store record: ``cls(id, session)`` then
    ``_hydrate(record)``."""

    def __init__(self, record_id: int, session: Session) -> None:
        raise NotImplementedError

    def _hydrate(self, record: Dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def _from_record(cls: Type[_R], session: Session, record: Dict[str, Any]) -> _R:
        made = cls(record["id"], session)
        made._hydrate(record)
        return made
