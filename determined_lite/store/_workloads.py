"""A trial's workloads as ``describe`` shows them: one row per reported batch count, with the
training and validation metrics reported there and the checkpoints taken there (Determined's
``describe`` condenses its training, validation and checkpoint workloads the same way).

``every=False`` keeps the rows a reader looks for (what Determined's web UI shows by default,
"Has Checkpoint or Validation"), plus the trial's latest training report: every validation and
checkpoint, the training metrics of the same batch count, and the last training row. Each is
an index lookup (``(trial_id, total_batches)`` is unique in both metric tables and indexed for
checkpoints), so the cost follows the rows shown, not the rows stored. ``every=True``: every
training row too, read in batch order from the same index.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple


class Workload(NamedTuple):
    trial_id: int
    total_batches: int
    training: Optional[Dict[str, Any]]  # the training metrics reported at this batch count
    validation: Optional[Dict[str, Any]]
    checkpoints: List[str]  # uuids, oldest first


_VALIDATION = (
    "SELECT total_batches, metrics FROM validation_metrics WHERE trial_id = ?1 ORDER BY total_batches"
)
_CHECKPOINTS = (
    "SELECT total_batches, uuid FROM checkpoints WHERE trial_id = ?1"
    " ORDER BY total_batches, created_at, rowid"
)
_EVERY_TRAINING = (
    "SELECT total_batches, metrics FROM training_metrics WHERE trial_id = ?1 ORDER BY total_batches"
)
_KEY_TRAINING = (
    "SELECT total_batches, metrics FROM training_metrics WHERE trial_id = ?1 AND total_batches IN"
    " (SELECT total_batches FROM validation_metrics WHERE trial_id = ?1"
    " UNION SELECT total_batches FROM checkpoints WHERE trial_id = ?1"
    " UNION SELECT MAX(total_batches) FROM training_metrics WHERE trial_id = ?1)"
    " ORDER BY total_batches"
)
# A training row that is not shown by default (stops at the first one found).
_LEFT_OUT = (
    "SELECT 1 FROM training_metrics WHERE trial_id = ?1 AND total_batches NOT IN"
    " (SELECT total_batches FROM validation_metrics WHERE trial_id = ?1"
    " UNION SELECT total_batches FROM checkpoints WHERE trial_id = ?1"
    " UNION SELECT MAX(total_batches) FROM training_metrics WHERE trial_id = ?1) LIMIT 1"
)


def trial_workloads(conn: sqlite3.Connection, trial_id: int, every: bool) -> Tuple[List[Workload], bool]:
    """The trial's workload rows by batch count (see the module's docstring), and whether
    training rows were left out (``every=False`` only)."""
    validation: Dict[int, str] = dict(conn.execute(_VALIDATION, (trial_id,)).fetchall())
    checkpoints: Dict[int, List[str]] = {}
    for batches, uuid in conn.execute(_CHECKPOINTS, (trial_id,)):
        checkpoints.setdefault(batches, []).append(uuid)
    training = conn.execute(_EVERY_TRAINING if every else _KEY_TRAINING, (trial_id,))
    rows = list(_merge(trial_id, training, validation, checkpoints))
    left_out = not every and conn.execute(_LEFT_OUT, (trial_id,)).fetchone() is not None
    return rows, left_out


_decode = json.JSONDecoder().raw_decode  # the store's own JSON text: no surrounding whitespace


def _merge(
    trial_id: int, training: Any, validation: Dict[int, str], checkpoints: Dict[int, List[str]]
) -> Iterator[Workload]:
    """One row per batch count of the (ordered) training rows, validations and checkpoints."""
    others = sorted(set(validation) | set(checkpoints))
    decoded = {batches: _decode(text)[0] for batches, text in validation.items()}
    i = 0
    for batches, text in training:
        while i < len(others) and others[i] < batches:
            found = others[i]
            yield Workload(trial_id, found, None, decoded.get(found), checkpoints.get(found, []))
            i += 1
        if i < len(others) and others[i] == batches:
            i += 1
        yield Workload(
            trial_id, batches, _decode(text)[0], decoded.get(batches), checkpoints.get(batches, [])
        )
    for batches in others[i:]:
        yield Workload(trial_id, batches, None, decoded.get(batches), checkpoints.get(batches, []))
