"""The experiment runner's log lines: buffered from the trials' output threads, then stored per
trial and echoed above the progress board by the runner's loop (one thread touches the store).

Trials run from the experiment's context snapshot (``$DET_LITE_HOME/experiments/<id>/context``):
a traceback's ``File "<snapshot>/model_def.py"`` is shown as the user's own file, under the
context directory ``experiment create`` was given."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Tuple

from determined_lite.experiment._progress import Progress
from determined_lite.store import context_snapshot_dir

# (trial id or None for the experiment, rank or None, text, echo on the terminal)
_Line = Tuple[Optional[int], Optional[int], str, bool]


class TrialLogs:
    """Collects lines from any thread; :meth:`flush` stores and echoes them from the loop's."""

    def __init__(self, store: Any, experiment_id: int, progress: Progress, echo: bool) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.progress = progress
        self.echo = echo
        self._lock = threading.Lock()
        self._buffer: List[_Line] = []
        self._paths = _user_paths(store, experiment_id)

    def on_output(self, trial_id: int, line: str) -> None:
        """A line a trial's process printed (``[rank N] `` prefixed by a distributed worker)."""
        rank = None
        if line.startswith("[rank "):
            head, _, rest = line.partition("] ")
            try:
                rank = int(head[len("[rank ") :])
                line = rest
            except ValueError:
                pass
        if self._paths is not None and self._paths[0] in line:
            line = line.replace(*self._paths)
        with self._lock:
            self._buffer.append((trial_id, rank, line, True))

    def log(self, trial_id: Optional[int], text: str, echo: bool = True) -> None:
        """A line of the runner's own, about ``trial_id`` (None: the experiment)."""
        with self._lock:
            self._buffer.append((trial_id, None, text, echo))

    def flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
        if not batch:
            return
        by_trial: Dict[Optional[int], List[Tuple[Optional[int], str]]] = {}
        for trial_id, rank, text, echo in batch:
            by_trial.setdefault(trial_id, []).append((rank, text))
            if self.echo and echo:
                where = f"[trial {trial_id}] " if trial_id is not None else ""
                who = f"[rank {rank}] " if rank is not None else ""
                self.progress.write(f"{where}{who}{text}")
        for trial_id, lines in by_trial.items():
            self.store.logs.add(trial_id, lines, experiment_id=self.experiment_id)


def _user_paths(store: Any, experiment_id: int) -> Optional[Tuple[str, str]]:
    """``('File "<snapshot>/', 'File "<context dir>/')``: a traceback line's file in the snapshot,
    and the same file in the user's context directory; None without a recorded context."""
    found = store.experiments.get(experiment_id) or {}
    context = found.get("context_dir")
    if not context:
        return None
    snapshot = context_snapshot_dir(experiment_id, store.home)
    return f'File "{snapshot}{os.sep}', f'File "{os.path.abspath(context)}{os.sep}'
