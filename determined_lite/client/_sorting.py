"""Checkpoint order for ``list_checkpoints`` (experiments and trials), by Determined's rules.

* ``sort_by`` and ``order_by`` are both given or both left out (``AssertionError`` otherwise);
* left out: the searcher's metric, ascending when ``searcher.smaller_is_better`` (default true);
* ``CheckpointSortBy.SEARCHER_METRIC`` with an order: that metric in that order;
* a ``str``: that validation metric; a ``CheckpointSortBy`` attribute: that attribute;
* checkpoints without the metric (or with NaN) come last in either order; ties keep the store's
  order (trial, then batch).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple, Union

from determined_lite.client._checkpoint import Checkpoint
from determined_lite.client._enums import CheckpointSortBy, OrderBy
from determined_lite.client._errors import warn_deprecated

SortBy = Union[str, CheckpointSortBy]


def check_sort_args(sort_by: Optional[SortBy], order_by: Optional[OrderBy]) -> None:
    """Determined's argument checks for ``list_checkpoints``."""
    if (sort_by is None) != (order_by is None):
        raise AssertionError("sort_by and order_by must be either both set, or neither.")
    if sort_by and not isinstance(sort_by, (CheckpointSortBy, str)):
        raise ValueError("sort_by must be of type CheckpointSortBy or str")


def resolve(
    sort_by: Optional[SortBy], order_by: Optional[OrderBy], config: Dict[str, Any]
) -> Tuple[SortBy, bool]:
    """The key to sort by and whether descending, from the arguments and the experiment config."""
    if not sort_by or sort_by == CheckpointSortBy.SEARCHER_METRIC:
        searcher = config.get("searcher") or {}
        metric = searcher.get("metric")
        if not isinstance(metric, str):
            raise ValueError("no searcher.metric found in experiment config; please provide a sort_by metric")
        if order_by is None:
            return metric, not searcher.get("smaller_is_better", True)
        return metric, order_by.value == OrderBy.DESC.value
    assert order_by is not None  # check_sort_args
    return sort_by, order_by.value == OrderBy.DESC.value


def _value(ckpt: Checkpoint, key: SortBy) -> Any:
    if isinstance(key, str):
        assert ckpt.training is not None
        value = ckpt.training.validation_metrics.get("avgMetrics", {}).get(key)
        if isinstance(value, float) and math.isnan(value):
            return None
        return value
    assert ckpt.training is not None and ckpt.state is not None
    attributes = {
        CheckpointSortBy.UUID: ckpt.uuid,
        CheckpointSortBy.TRIAL_ID: ckpt.training.trial_id,
        CheckpointSortBy.BATCH_NUMBER: ckpt.steps_completed,
        CheckpointSortBy.END_TIME: ckpt.report_time,
        CheckpointSortBy.STATE: ckpt.state.value,
    }
    return attributes[key]


def sort_checkpoints(
    checkpoints: List[Checkpoint],
    sort_by: Optional[SortBy],
    order_by: Optional[OrderBy],
    config: Dict[str, Any],
    max_results: Optional[int] = None,
) -> List[Checkpoint]:
    """``checkpoints`` (in the store's order) sorted as ``list_checkpoints`` returns them."""
    check_sort_args(sort_by, order_by)
    if not checkpoints:
        return []
    key, descending = resolve(sort_by, order_by, config)
    present = [c for c in checkpoints if _value(c, key) is not None]
    missing = [c for c in checkpoints if _value(c, key) is None]
    present.sort(key=lambda c: _value(c, key), reverse=descending)
    ordered = present + missing
    return ordered if max_results is None else ordered[: max(0, int(max_results))]


def top_checkpoint(
    owner: Any, sort_by: Optional[SortBy], smaller_is_better: Optional[bool], empty: Exception
) -> Checkpoint:
    """``owner.top_checkpoint`` (an experiment's or a trial's), deprecated in Determined with its
    FutureWarning: the searcher metric and direction when ``sort_by`` is left out; with
    ``sort_by``, ascending only when ``smaller_is_better`` is true (Determined: descending when
    it is left out). ``empty`` is raised when there is no checkpoint."""
    kind = type(owner).__name__
    warn_deprecated(
        f"{kind}.top_checkpoint() has been deprecated and will be removed in a future version."
        f"Please call {kind}.list_checkpoints(...,max_results=1) instead.",
        stacklevel=4,
    )
    order_by = (OrderBy.ASC if smaller_is_better else OrderBy.DESC) if sort_by else None
    checkpoints = owner.list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
    if not checkpoints:
        raise empty
    return checkpoints[0]
