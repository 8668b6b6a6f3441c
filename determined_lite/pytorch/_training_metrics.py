"""Training metrics of one report: per batch and averaged, across workers, as Determined reports them.

Each worker sends its chunk's numeric metrics, stacked per metric (``TrainingPartial``), in the
report's one all-gather; every worker then averages each batch over the workers (Determined's
``average_training_metrics``) and the report's average is the mean of those batch values.
Values that are not numbers (strings, dicts, ``None``) are reported as Determined reports them:
no average (``None``), and each worker's own values in the per-batch metrics. A value that is
``None`` in some batches is averaged over the others.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from determined_lite.pytorch._reducer import metric_names, reduced_value, stack_values, to_json_metric

WORKLOAD = "training"


@dataclasses.dataclass
class TrainingPartial:
    """One worker's training metrics since the last report, as they travel in the gather."""

    batches: int
    # per metric: (the chunk positions it has a value at, None for all; the values stacked)
    values: Dict[str, Tuple[Optional[List[int]], np.ndarray]]
    unaveraged: List[str]  # metrics with values that are not numbers


def training_partial(batch_metrics: Sequence[Mapping[str, Any]]) -> TrainingPartial:
    """Stack this worker's per-batch values of every numeric metric."""
    values: Dict[str, Tuple[Optional[List[int]], np.ndarray]] = {}
    unaveraged: List[str] = []
    for name in metric_names(batch_metrics):
        rows = [(i, m[name]) for i, m in enumerate(batch_metrics) if m.get(name) is not None]
        try:
            if not rows:
                raise TypeError(f"{WORKLOAD} metric {name!r} is always None")
            stacked = stack_values([v for _, v in rows], name, WORKLOAD)
        except TypeError:
            for m in batch_metrics:  # reported as they are: they must be JSON
                to_json_metric(m.get(name), name, WORKLOAD)
            unaveraged.append(name)
            continue
        positions = None if len(rows) == len(batch_metrics) else [i for i, _ in rows]
        values[name] = (positions, stacked)
    return TrainingPartial(len(batch_metrics), values, unaveraged)


class BatchMetrics(Sequence):
    """The per-batch metrics of a report (numeric ones averaged over workers), built on access."""

    def __init__(
        self,
        names: List[str],
        averaged: Dict[str, Tuple[np.ndarray, np.ndarray]],
        local: Sequence[Mapping[str, Any]],
        batches: int,
    ) -> None:
        self._names = names
        self._averaged = averaged  # name -> (has a value, per batch; the values where it has one)
        self._rows = {name: np.cumsum(has) - 1 for name, (has, _) in averaged.items()}
        self._local = local
        self._batches = batches

    def __len__(self) -> int:
        return self._batches

    def _batch(self, i: int) -> Dict[str, Any]:
        local = self._local[i] if i < len(self._local) else {}
        out: Dict[str, Any] = {}
        for name in self._names:
            if name in self._averaged and self._averaged[name][0][i]:
                out[name] = reduced_value(self._averaged[name][1][self._rows[name][i]])
            elif name in local:
                out[name] = local[name]
        return out

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._batch(i) for i in range(*index.indices(len(self)))]
        return self._batch(range(len(self))[index])

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return (self._batch(i) for i in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


@dataclasses.dataclass
class TrainingReport:
    """What callbacks get: ``metrics`` (averages; ``None`` when not numeric) and ``batch_metrics``."""

    metrics: Dict[str, Any]
    batch_metrics: BatchMetrics


def training_cross_slot(
    partials: List[TrainingPartial], local: Sequence[Mapping[str, Any]]
) -> TrainingReport:
    """Average every batch over the workers' ``partials`` (ordered by rank), then over the batches.

    ``local``: this worker's own per-batch metrics (for the values that are not averaged).
    """
    batches = max(p.batches for p in partials)
    unaveraged = {name for p in partials for name in p.unaveraged}
    names = list(dict.fromkeys(metric_names(local) + [n for p in partials for n in p.values]))
    names += [n for n in unaveraged if n not in names]
    metrics: Dict[str, Any] = {}
    averaged: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}
    for name in names:
        if name in unaveraged:
            metrics[name] = None
            continue
        parts = [p.values[name] for p in partials if name in p.values]
        shape = parts[0][1].shape[1:]
        sums = np.zeros((batches,) + shape)
        counts = np.zeros(batches)
        for positions, stacked in parts:
            if stacked.shape[1:] != shape:
                raise ValueError(
                    f"{WORKLOAD} metric {name!r} has shape {stacked.shape[1:]} on one worker and "
                    f"{shape} on another; a metric must have the same shape on every worker"
                )
            where: Union[slice, List[int]] = slice(0, len(stacked)) if positions is None else positions
            sums[where] += stacked
            counts[where] += 1
        has = counts > 0
        means = sums[has] / counts[has].reshape((-1,) + (1,) * len(shape))
        metrics[name] = reduced_value(means.mean(axis=0))
        averaged[name] = (has, means)
    return TrainingReport(metrics, BatchMetrics(names, averaged, local, batches))
