"""Store: one ``Database`` (the SQLite file: connections, migrations, transactions) and the
repositories over it, each holding the SQL of its tables:

* ``experiments``: experiment rows, state, process, searcher state, labels and notes, describe;
* ``trials``: trial rows, their runs, a trial's describe;
* ``metrics``: training and validation reports, curve buckets, workloads;
* ``checkpoints``: checkpoints and their SDK metadata;
* ``models``: the model registry;
* ``requests``: pause/kill requests of experiments and trials;
* ``logs``: log lines.
"""

from __future__ import annotations

from typing import Any, Optional

from determined_lite.store._checkpoints import Checkpoints
from determined_lite.store._db import Database
from determined_lite.store._experiments import Experiments
from determined_lite.store._logs import Logs
from determined_lite.store._metrics import Metrics
from determined_lite.store._models import Models
from determined_lite.store._requests import Requests
from determined_lite.store._trials import Trials


class Store:
    """The experiment store at ``path`` (default ``$DET_LITE_HOME/det-lite.db``).

    Safe to use from several threads and processes; ``timeout`` bounds how long a write waits
    for the lock before raising ``StoreError``. Unknown ids raise ``NotFoundError`` (a
    ``StoreError`` and a ``KeyError``) from writers; getters return None. ``read_only``: open an
    existing store of the current schema for reading only (``det-lite ui`` reads through one).
    """

    def __init__(self, path: Optional[str] = None, timeout: float = 30.0, read_only: bool = False) -> None:
        self.db = Database(path, timeout=timeout, read_only=read_only)
        self.experiments = Experiments(self.db)
        self.trials = Trials(self.db)
        self.metrics = Metrics(self.db)
        self.checkpoints = Checkpoints(self.db)
        self.models = Models(self.db)
        self.requests = Requests(self.db)
        self.logs = Logs(self.db)

    @property
    def path(self) -> str:
        """The database file (absolute)."""
        return self.db.path

    @property
    def home(self) -> str:
        """The det-lite home its experiments' files are under: the directory that holds it,
        unless ``$DET_LITE_DB`` put the store elsewhere."""
        return self.db.home

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    def close(self) -> None:
        """Close this thread's connection (a later call opens a new one)."""
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
