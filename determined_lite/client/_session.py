"""Where the SDK's objects read and write: det-lite's store, in place of Determined's master."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Dict, Optional

from determined_lite.store import Store, default_db_path

_lock = threading.Lock()
_opened: Dict[str, Store] = {}


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
        with _lock:
            found = _opened.get(self.db_path)
            if found is None:
                found = _opened[self.db_path] = Store(self.db_path)
            return found
