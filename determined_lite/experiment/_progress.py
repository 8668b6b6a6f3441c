"""What a foreground experiment shows: a progress bar per running trial, and a summary at the end.

A bar is labelled by its trial id and the hyperparameters the searcher varies (constants say
nothing about which trial is which) and shows the chief's measurements (``_progress.py``):
batches, throughput since the first batch, ETA, latest loss and searcher metric. The summary
lists the trials best first by the searcher metric, each with its best checkpoint.
"""

from __future__ import annotations

import math
import re
import textwrap
import time
from typing import AbstractSet, Any, Dict, List, Optional, Sequence, TextIO, Tuple

from determined_lite._progress import TrialProgress
from determined_lite._terminal import BarBoard, fit, format_duration, format_number
from determined_lite.reporting._retention import best_checkpoints
from determined_lite.store import STOPPED_EARLY, trial_display_state

Path = Tuple[str, ...]
SHORT_UUID = 8  # characters of a checkpoint uuid shown in tables (any unique prefix resolves)

# det-lite's own INFO lines from a worker carry the time and logger name for `experiment logs`;
# on the terminal, above the bars, the message alone reads better.
_OWN_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO determined_lite: ")


def compact_log_line(line: str) -> str:
    """``[trial 1] 2026-01-01 10:00:00,123 INFO determined_lite: batch 23 ...`` becomes
    ``[trial 1] batch 23 ...``; other lines are left as they are."""
    head, sep, rest = line.rpartition("] ")
    if sep:
        return head + sep + _OWN_LOG_PREFIX.sub("", rest)
    return _OWN_LOG_PREFIX.sub("", line)


def _lookup(hparams: Dict[str, Any], path: Path) -> Any:
    node: Any = hparams
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def hparam_text(hparams: Dict[str, Any], varying: Sequence[Path]) -> str:
    """``lr=0.01 layers.width=64``: the varying hyperparameters of one trial."""
    return " ".join(f"{'.'.join(p)}={format_number(_lookup(hparams, p))}" for p in varying)


class Progress:
    """One bar per running trial at the bottom of ``out``; log lines are written above them."""

    def __init__(self, enabled: bool, out: TextIO, varying: Sequence[Path] = ()) -> None:
        self.board = BarBoard(out, enabled=enabled)
        self.varying = list(varying)
        self._bars: Dict[int, Tuple[str, float]] = {}  # trial id -> (label, start time)
        self._progress: Dict[int, TrialProgress] = {}

    @property
    def enabled(self) -> bool:
        return self.board.enabled

    def start(self, trial_id: int, hparams: Dict[str, Any], where: str = "") -> None:
        """A bar for ``trial_id``; ``where``: its devices (``where_text``), shown after its id."""
        label = " ".join(filter(None, [f"trial {trial_id}", where, hparam_text(hparams, self.varying)]))
        self._bars[trial_id] = (label, time.monotonic())
        self._progress.pop(trial_id, None)
        self.board.update(trial_id, lambda width: self._line(trial_id, width))
        self.board.refresh(force=True)

    def _line(self, trial_id: int, width: int) -> str:
        label, started = self._bars[trial_id]
        elapsed = time.monotonic() - started
        progress = self._progress.get(trial_id)
        if progress is None:
            return fit(f"{label}: starting [{format_duration(elapsed)}]", width)
        return progress.line(label, width, elapsed)

    def update(self, trial_id: int, progress: Optional[TrialProgress]) -> None:
        if trial_id in self._bars and progress is not None:
            self._progress[trial_id] = progress
        self.board.refresh()

    def stop(self, trial_id: int) -> None:
        """The trial's run ended: its bar's last state stays on the screen as a line."""
        self.board.remove(trial_id, keep=trial_id in self._progress)
        self._bars.pop(trial_id, None)
        self._progress.pop(trial_id, None)

    def write(self, line: str) -> None:
        self.board.write(compact_log_line(line) if self.enabled else line)

    def close(self) -> None:
        for trial_id in list(self._bars):
            self.stop(trial_id)
        self.board.close()


# --- the summary ----------------------------------------------------------------------------


def _best_checkpoint(trial: Dict[str, Any], metric: str, smaller_is_better: bool) -> Optional[Dict[str, Any]]:
    """The trial's checkpoint with the best searcher metric; the latest when none has it."""
    checkpoints = trial.get("checkpoints") or []
    best = best_checkpoints(checkpoints, 1, metric, smaller_is_better)
    if best:
        return next(c for c in checkpoints if c["uuid"] == best[0])
    return max(checkpoints, key=lambda c: c["total_batches"]) if checkpoints else None


def _order(trial: Dict[str, Any], smaller_is_better: bool) -> Tuple[bool, float, int]:
    best = trial.get("best_validation")
    if best is None or math.isnan(best):
        return True, 0.0, trial["id"]
    return False, (best if smaller_is_better else -best), trial["id"]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> List[str]:
    """Columns two spaces apart, numbers right-aligned, no padding after the last column."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str], right: Sequence[bool]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return [line(headers, numeric)] + [line(r, numeric) for r in rows]


def _fit_columns(
    headers: List[str], rows: List[List[str]], numeric: List[bool], width: Optional[int], drop: Sequence[str]
) -> List[str]:
    """Leave out columns named in ``drop`` (least useful first), in place, until the table fits
    ``width`` (None: no limit); values are never cut. The headers left out."""
    dropped: List[str] = []
    for name in drop:
        if width is None or max(len(line) for line in _table(headers, rows, numeric)) <= width:
            break
        if name in headers and len(headers) > 2:
            i = headers.index(name)
            del headers[i], numeric[i]
            for row in rows:
                del row[i]
            dropped.append(name)
    return dropped


def _best_line(best: Dict[str, Any], metric: str, varying: Sequence[Path], width: Optional[int]) -> str:
    """``best trial: 3 (lr=0.01 …), val_loss = 0.0391``: the metric as the table shows it, and
    as many whole hyperparameters as ``width`` leaves room for."""
    items = hparam_text(best["hparams"], varying).split()
    value = format_number(best["best_validation"])
    for keep in range(len(items), -1, -1):
        shown = " ".join(items[:keep] + (["…"] if keep < len(items) else []))
        line = f"best trial: {best['id']}{f' ({shown})' if shown else ''}, {metric} = {value}"
        if width is None or len(line) <= width:
            break
    return line


def where_text(run: Dict[str, Any], host: bool = False) -> str:
    """Where a trial run (a ``describe`` ``runs`` entry) was placed: ``gpu 0,1``, with its host
    first when ``host``; empty on CPU slots of this machine."""
    devices = ",".join(run.get("devices") or [])
    where = f"gpu {devices}" if devices else ""
    return " ".join(filter(None, [run.get("host", "") if host else "", where]))


def _where_column(trials: Sequence[Dict[str, Any]]) -> Optional[List[str]]:
    """Each trial's latest placement, or None when no run held devices on one host (CPU)."""
    runs = [t["runs"][-1] if t.get("runs") else {} for t in trials]
    hosts = {r["host"] for r in runs if r}
    if len(hosts) <= 1 and not any(r.get("devices") for r in runs):
        return None
    return [where_text(r, host=len(hosts) > 1) if r else "" for r in runs]


def summary(
    description: Dict[str, Any],
    *,
    metric: str,
    smaller_is_better: bool,
    varying: Sequence[Path] = (),
    stopped_early: AbstractSet[int] = frozenset(),
    width: Optional[int] = None,
) -> str:
    """The trials best first by ``metric``: state (``ASHA-stopped`` for trials the searcher ended
    early), batches, best metric, best checkpoint and the varying hyperparameters; then the
    best trial and its checkpoint. Fitted to ``width`` (a terminal's) by leaving out the
    checkpoint (the best one has its own line), batches, hyperparameters from the last, then
    state, and one line says which; no value is cut."""
    trials = sorted(description["trials"], key=lambda t: _order(t, smaller_is_better))
    names = [".".join(p) for p in varying]
    headers = ["trial", "state", "batches", f"best {metric}", "checkpoint", *names]
    numeric = [True, False, True, True, False] + [
        all(isinstance(_lookup(t["hparams"], p), (int, float)) for t in trials) for p in varying
    ]
    rows = []
    for t in trials:
        checkpoint = _best_checkpoint(t, metric, smaller_is_better)
        rows.append(
            [
                str(t["id"]),
                STOPPED_EARLY if t["id"] in stopped_early else trial_display_state(t),
                str(t.get("total_batches") or 0),
                format_number(t.get("best_validation")),
                checkpoint["uuid"][:SHORT_UUID] if checkpoint else "",
                *[format_number(_lookup(t["hparams"], p)) for p in varying],
            ]
        )
    where = _where_column(trials)
    if where is not None:  # where each trial ran, when its trials hold GPUs or span hosts
        headers.insert(2, "where")
        numeric.insert(2, False)
        for row, text in zip(rows, where):
            row.insert(2, text)
    drop = ["checkpoint", "batches", *names[::-1], "where", "state"]
    dropped = _fit_columns(headers, rows, numeric, width, drop)
    lines = _table(headers, rows, numeric) if rows else ["no trials"]
    if dropped and rows:
        lines += textwrap.wrap(f"(left out to fit {width} columns: {', '.join(dropped)})", width or 80)
    best = trials[0] if trials and not _order(trials[0], smaller_is_better)[0] else None
    if best is not None:
        lines.append(_best_line(best, metric, varying, width))
        checkpoint = _best_checkpoint(best, metric, smaller_is_better)
        if checkpoint is not None:
            lines.append(f"best checkpoint: {checkpoint['uuid']} (batch {checkpoint['total_batches']})")
    return "\n".join(lines)
