"""Metric reduction: built-in reducers, custom MetricReducers, and per-slot → cross-slot merging.

Every reduction is split in two: each worker turns what it saw into a small picklable
"partial" (``per_slot``), the partials of all workers travel in ONE all-gather, and every
worker merges them the same way (``cross_slot``). Single process is the same path with one
partial. Training metrics are reduced in ``_training_metrics.py`` with the helpers here.

Reduced metrics reach callbacks as numpy values, as in Determined: a result with one element
is an ``np.float64`` (a Python float, so it can be the searcher metric), a larger one an
``np.ndarray``; :func:`plain_metrics` gives the JSON form stored in results.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import itertools
import json
import numbers
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from determined_lite._errors import (
    EvaluationReducerError,
    MetricTypeError,
    ReducerTypeError,
    ReducerUseError,
)


class Reducer(enum.Enum):
    """How per-batch validation metrics become one value.

    ``AVG`` is weighted by batch length (the true per-record mean, whatever the batch sizes
    and however records are spread across workers); ``BATCH_AVG`` is Determined's unweighted
    mean of per-batch values.
    """

    AVG = "avg"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    BATCH_AVG = "batch_avg"


class MetricReducer(abc.ABC):
    """A user-defined metric computed correctly across workers (see ``wrap_reducer``)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget collected values; called before every training chunk and validation."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This worker's picklable intermediate result."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: List[Any]) -> Any:
        """The final metric (or dict of metrics) from every worker's ``per_slot_reduce``, by rank."""


class _FunctionReducer(MetricReducer):
    """Buffers every ``update`` value; the user's function sees them all at once, in order."""

    def __init__(self, fn: Callable[[List[Any]], Any]) -> None:
        self._fn = fn
        self._values: List[Any] = []

    def update(self, value: Any) -> None:
        self._values.append(value)

    def reset(self) -> None:
        self._values = []

    def per_slot_reduce(self) -> List[Any]:
        return self._values

    def cross_slot_reduce(self, per_slot_metrics: List[Any]) -> Any:
        flat = [v for slot in per_slot_metrics for v in slot]
        return self._fn(flat)

    def __repr__(self) -> str:
        return f"FunctionReducer({getattr(self._fn, '__qualname__', self._fn)!r})"


class WrappedReducer:
    """A registered custom reducer with its name and the workloads it takes part in.

    Breaking the name/dict rule raises :class:`ReducerUseError`, an ``AssertionError`` as in
    Determined (and a ``ValueError``, det-lite's earlier type)."""

    def __init__(
        self,
        reducer: MetricReducer,
        name: Optional[str],
        for_training: bool,
        for_validation: bool,
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation

    @property
    def label(self) -> str:
        return repr(self.name) if self.name is not None else repr(self.reducer)

    def finish(self, per_slot: List[Any], workload: str) -> Dict[str, Any]:
        """Cross-slot reduce and check the name/dict rule; returns metrics as numpy values."""
        result = self.reducer.cross_slot_reduce(per_slot)
        if self.name is not None:
            if isinstance(result, Mapping):
                raise ReducerUseError(
                    f"the custom reducer {self.label} was wrapped by a call to wrap_reducer() "
                    f"with name set but it returned a dict anyway (keys {sorted(result)}); leave "
                    "name=None to return several metrics, or return a single (non-dict) metric"
                )
            return {self.name: numpy_metric(result, self.name, workload)}
        if not isinstance(result, Mapping):
            raise ReducerUseError(
                f"the custom reducer {self.label} was wrapped by a call to wrap_reducer() with "
                f"name=None but it did not return a dict (it returned a {type(result).__name__}); "
                "set name to return a single metric, or return a dict of metric names to values"
            )
        return {str(k): numpy_metric(v, str(k), workload) for k, v in result.items()}


def wrap_reducer(
    reducer: Union[Callable[[List[Any]], Any], MetricReducer],
    name: Optional[str],
    for_training: bool,
    for_validation: bool,
) -> WrappedReducer:
    """Validate a user's reducer (function or MetricReducer) and wrap it."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"wrap_reducer(name=...) must be a string or None, got {name!r}")
    if not (for_training or for_validation):
        raise ValueError("wrap_reducer(...) with for_training=False and for_validation=False would never run")
    if isinstance(reducer, MetricReducer):
        impl = reducer
    elif callable(reducer):
        impl = _FunctionReducer(reducer)
    else:
        raise ReducerTypeError(
            "wrap_reducer(reducer=...) must be a function taking a list of values or a "
            f"determined_lite.pytorch.MetricReducer, got {type(reducer).__name__}"
        )
    return WrappedReducer(impl, name, for_training, for_validation)


# --- JSON and numpy forms -------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 and value.dim() == 0 else value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json_metric(value: Any, name: str, workload: str) -> Any:
    """``value`` as plain JSON data (tensors and numpy converted), or a TypeError naming it."""
    plain = _plain(value)
    try:
        json.dumps(plain, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise MetricTypeError(
            f"{workload} metric {name!r} is not JSON-serializable ({type(value).__name__}: {e}); "
            "metrics must be numbers, strings, tensors, numpy values, or lists/dicts of those"
        ) from None
    return plain


def plain_metrics(metrics: Mapping[str, Any]) -> Dict[str, Any]:
    """Metrics as plain JSON data (what results, checkpoints and the store hold)."""
    return {name: _plain(value) for name, value in metrics.items()}


def reduced_value(array: np.ndarray) -> Any:
    """A reduced metric as callbacks get it: ``np.float64`` when it has one element, else the array."""
    return np.float64(array.reshape(-1)[0]) if array.size == 1 else array


def numpy_metric(value: Any, name: str, workload: str) -> Any:
    """A metric computed by the trial or a reducer as callbacks get it: tensors as numpy (as in
    Determined), one element as a numpy scalar, anything else as it is. A value that is not
    JSON-serializable is a TypeError naming it."""
    to_json_metric(value, name, workload)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, np.floating):
        value = np.float64(value)
    return value


# --- numbers --------------------------------------------------------------------------------


def stack_values(values: Sequence[Any], name: str, workload: str) -> np.ndarray:
    """Stack per-batch metric values into one float64 array (one device transfer for tensors).

    Raises TypeError for values that are not numbers (bools count as 0 and 1, as in numpy) and
    ValueError when the shape changes between batches.
    """
    if all(isinstance(v, torch.Tensor) for v in values):
        try:
            with torch.no_grad():  # one scope instead of a detach per value: no graph either way
                stacked = torch.stack(list(values))
        except RuntimeError as e:
            raise ValueError(
                f"{workload} metric {name!r} changes shape between batches ({e}); "
                "a metric must have the same shape in every batch"
            ) from None
        return stacked.to(device="cpu", dtype=torch.float64).numpy()
    converted = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().to(torch.float64).numpy()
        elif not isinstance(v, (numbers.Number, np.ndarray, np.generic, list, tuple)):
            raise TypeError(
                f"{workload} metric {name!r} has a value of type {type(v).__name__} that cannot "
                "be averaged; return numbers, tensors or numpy arrays (put other values in a "
                "custom reducer via context.wrap_reducer)"
            )
        try:
            converted.append(np.asarray(v, dtype=np.float64))
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"{workload} metric {name!r} has a value that is not an array of numbers ({e}); "
                "return numbers, tensors or numpy arrays (put other values in a custom reducer "
                "via context.wrap_reducer)"
            ) from None
    try:
        return np.stack(converted)
    except ValueError as e:
        raise ValueError(
            f"{workload} metric {name!r} changes shape between batches ({e}); "
            "a metric must have the same shape in every batch"
        ) from None


def metric_names(batch_metrics: Sequence[Mapping[str, Any]]) -> List[str]:
    """Every metric name of a list of per-batch dicts, in first-seen order."""
    return list(dict.fromkeys(itertools.chain.from_iterable(batch_metrics)))


# --- validation metrics ---------------------------------------------------------------------


def _reducer_for(reducers: Union[Reducer, Mapping[str, Reducer]], name: str) -> Reducer:
    if isinstance(reducers, Reducer):
        return reducers
    if name not in reducers:
        raise EvaluationReducerError(
            f"evaluation_reducer() returned a dict without a reducer for metric {name!r} "
            f"(it has {sorted(reducers)}); add an entry or return a single Reducer"
        )
    return reducers[name]


def check_evaluation_reducer(reducers: Any) -> Union[Reducer, Dict[str, Reducer]]:
    """Validate what ``evaluation_reducer()`` returned: a Reducer, or a non-empty dict of them
    (Determined: ``InvalidExperimentException`` otherwise)."""
    if isinstance(reducers, Reducer):
        reducer_kind(reducers)
        return reducers
    if isinstance(reducers, Mapping) and all(isinstance(r, Reducer) for r in reducers.values()):
        if not reducers:
            raise EvaluationReducerError(
                "evaluation_reducer() returned an empty dict; return a single Reducer or a "
                "Reducer for every validation metric"
            )
        for r in reducers.values():
            reducer_kind(r)
        return dict(reducers)
    raise EvaluationReducerError(
        "evaluation_reducer() must return a determined_lite.pytorch.Reducer or a dict of metric "
        f"names to Reducers, got {reducers!r}"
    )


@dataclasses.dataclass(frozen=True)
class ReducerKind:
    """How one ``Reducer`` reduces a metric: ``per_slot(values, lengths)`` gives a worker's
    (value, weight) from its per-batch values and batch lengths, ``merge`` combines two workers'
    values, and a ``mean`` divides the merged value by the summed weights at the end."""

    per_slot: Callable[[np.ndarray, np.ndarray], Tuple[np.ndarray, Optional[float]]]
    merge: Callable[[np.ndarray, np.ndarray], np.ndarray]
    mean: bool = False


def _weighted_sum(arr: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, Optional[float]]:
    w = lengths.reshape((-1,) + (1,) * (arr.ndim - 1))
    return (arr * w).sum(axis=0), float(w.sum())


# The one table of reducer kinds: a Reducer member missing here is an error, never a default.
REDUCER_KINDS: Dict[Reducer, ReducerKind] = {
    Reducer.AVG: ReducerKind(_weighted_sum, np.add, mean=True),
    Reducer.BATCH_AVG: ReducerKind(lambda arr, n: (arr.sum(axis=0), float(len(arr))), np.add, mean=True),
    Reducer.SUM: ReducerKind(lambda arr, n: (arr.sum(axis=0), None), np.add),
    Reducer.MAX: ReducerKind(lambda arr, n: (arr.max(axis=0), None), np.maximum),
    Reducer.MIN: ReducerKind(lambda arr, n: (arr.min(axis=0), None), np.minimum),
}


def reducer_kind(kind: Reducer) -> ReducerKind:
    """The table's entry for ``kind``; a kind it lacks raises :class:`ReducerTypeError`."""
    try:
        return REDUCER_KINDS[kind]
    except (KeyError, TypeError):
        raise ReducerTypeError(
            f"unknown reducer kind {kind!r}; the reducer kinds are {[r.name for r in REDUCER_KINDS]}"
        ) from None


def validation_partial(
    batch_metrics: List[Dict[str, Any]],
    batch_lengths: List[int],
    reducers: Union[Reducer, Mapping[str, Reducer]],
) -> Dict[str, Any]:
    """Per-slot partial of ``evaluate_batch`` outputs: small and mergeable per reducer kind."""
    partial: Dict[str, Tuple[Reducer, Any, Optional[float]]] = {}
    for name in metric_names(batch_metrics):
        kind = _reducer_for(reducers, name)
        rows = [(m[name], n) for m, n in zip(batch_metrics, batch_lengths) if name in m]
        arr = stack_values([v for v, _ in rows], name, "validation")
        lengths = np.asarray([n for _, n in rows], dtype=np.float64)
        partial[name] = (kind, *reducer_kind(kind).per_slot(arr, lengths))
    return partial


def validation_cross_slot(partials: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Merge per-slot validation partials (ordered by rank) into final metrics (numpy values)."""
    merged: Dict[str, List[Any]] = {}
    for partial in partials:
        for name, (kind, value, weight) in partial.items():
            if name not in merged:
                merged[name] = [kind, value, weight]
                continue
            acc, spec = merged[name], reducer_kind(kind)
            acc[1] = spec.merge(acc[1], value)
            if spec.mean:
                acc[2] = acc[2] + weight
    out = {}
    for name, (kind, value, weight) in merged.items():
        if reducer_kind(kind).mean:
            value = value / weight if weight else np.full_like(value, np.nan)
        out[name] = reduced_value(np.asarray(value))
    return out


def merge_reducer_metrics(
    base: Dict[str, Any], wrapped: Sequence[WrappedReducer], per_slot: List[List[Any]], workload: str
) -> Dict[str, Any]:
    """Add each custom reducer's result to ``base``; ``per_slot[rank][i]`` belongs to ``wrapped[i]``."""
    out = dict(base)
    for i, w in enumerate(wrapped):
        for name, value in w.finish([slot[i] for slot in per_slot], workload).items():
            if name in out:
                raise ValueError(
                    f"{workload} metric {name!r} is produced twice: by reducer {w.label} and by "
                    f"{'train_batch' if workload == 'training' else 'evaluate_batch'} or another "
                    "reducer; give one of them another name"
                )
            out[name] = value
    return out
