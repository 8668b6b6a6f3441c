"""One validation pass: ``evaluate_batch`` sharded over the workers, or ``evaluate_full_dataset``.

Either way the models are in eval mode under ``torch.no_grad()`` (and autocast with AMP), the
RNG streams are left as they were, and every worker ends with the same reduced metrics.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Iterable, List, Mapping, Tuple, Union

import torch

from determined_lite._errors import OutputTypeError
from determined_lite.config._settings import TEST_MODE_VALIDATION_BATCHES
from determined_lite.pytorch import _rng
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._fetch import in_process_batches
from determined_lite.pytorch._hooks import Hook
from determined_lite.pytorch._reducer import (
    Reducer,
    merge_reducer_metrics,
    numpy_metric,
    validation_cross_slot,
    validation_partial,
)
from determined_lite.pytorch._trial import PyTorchTrial


@dataclasses.dataclass(frozen=True)
class EvaluationMode:
    """Which evaluation method a trial overrides, and ``evaluate_batch``'s signature."""

    full_dataset: bool
    takes_batch_idx: bool  # Determined's newer evaluate_batch(batch, batch_idx)


def _overrides(trial: PyTorchTrial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(PyTorchTrial, name)


def _takes_batch_idx(method: Callable[..., Any]) -> bool:
    params = [
        p
        for p in inspect.signature(method).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(params) >= 2


def evaluation_mode(trial: PyTorchTrial) -> EvaluationMode:
    """Check that ``trial`` overrides exactly one of the two evaluation methods."""
    batch, full = _overrides(trial, "evaluate_batch"), _overrides(trial, "evaluate_full_dataset")
    if batch == full:
        which = "both" if batch else "neither"
        raise TypeError(
            f"{type(trial).__name__} must override exactly one of evaluate_batch() and "
            f"evaluate_full_dataset(); it overrides {which}"
        )
    takes_idx = (not full) and _takes_batch_idx(trial.evaluate_batch)
    return EvaluationMode(full_dataset=full, takes_batch_idx=takes_idx)


class Validation:
    """Runs validations of one trial on one worker (``test_mode``: its first batches only)."""

    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        loader: Any,
        reducer_kinds: Union[Reducer, Mapping[str, Reducer]],
        mode: EvaluationMode,
        *,
        test_mode: bool = False,
    ) -> None:
        self.trial = trial
        self.context = context
        self.harness = context.harness
        self.dist = context.distributed
        self.loader = loader
        self.reducer_kinds = reducer_kinds
        self.mode = mode
        self.test_mode = test_mode

    def run(self) -> Dict[str, Any]:
        """Validate and return the metrics reduced across workers (the same on every rank)."""
        harness = self.harness
        harness.reset_reducers(training=False)
        models = harness.models
        modes = [m.training for m in models]
        for m in models:
            m.eval()
        # Validation never moves the training RNG streams: how often a trial validates (or
        # validating at the end of a run that is resumed later) cannot change training.
        rng = _rng.capture_rng_state()
        try:
            with torch.no_grad(), harness.precision.autocast():
                metrics = self._evaluate_full() if self.mode.full_dataset else self._evaluate_batches()
        finally:
            _rng.restore_rng_state(rng)
            for m, mode in zip(models, modes):
                m.train(mode)
        # Training resumes with a fresh chunk: a reducer used for both workloads must not carry
        # the values of this validation into it.
        harness.reset_reducers(training=True)
        return metrics

    def _evaluate_batches(self) -> Dict[str, Any]:
        cbs, trial, seed = self.harness.callbacks, self.trial, self.harness.trial_seed
        batches: Iterable[Any] = self.loader
        if isinstance(self.loader, DataLoader):
            batches = in_process_batches(
                self.loader.sharding.validation_loader(
                    rank=self.dist.rank, num_replicas=self.dist.size, seed=seed
                )
            )
        limit = TEST_MODE_VALIDATION_BATCHES if self.test_mode else None
        outputs: List[Dict[str, Any]] = []
        lengths: List[int] = []
        cbs.call(Hook.ON_VALIDATION_EPOCH_START)
        for idx, batch in enumerate(batches):
            if limit is not None and idx >= limit:
                break
            lengths.append(trial.get_batch_length(batch))
            if self.harness.auto_to_device:
                batch = self.context.to_device(batch)
            cbs.call(Hook.ON_VALIDATION_BATCH_START, batch, idx)
            if self.mode.takes_batch_idx:
                out = trial.evaluate_batch(batch, idx)  # type: ignore[call-arg]
            else:
                out = trial.evaluate_batch(batch)
            if not isinstance(out, dict):
                raise OutputTypeError(
                    f"{type(trial).__name__}.evaluate_batch() must return a dict of metric names "
                    f"to values, got {type(out).__name__}"
                )
            cbs.call(Hook.ON_VALIDATION_BATCH_END, out, idx)
            outputs.append(out)
        cbs.call(Hook.ON_VALIDATION_EPOCH_END, outputs)
        reducers = self.harness.reducers_for(training=False)
        partial = validation_partial(outputs, lengths, self.reducer_kinds)
        gathered = self.dist.allgather(
            {"metrics": partial, "reducers": [r.reducer.per_slot_reduce() for r in reducers]}
        )
        metrics = validation_cross_slot([g["metrics"] for g in gathered])
        return merge_reducer_metrics(metrics, reducers, [g["reducers"] for g in gathered], "validation")

    def _evaluate_full(self) -> Dict[str, Any]:
        """Chief evaluates the whole set; every rank receives the result (or the chief's error)."""
        outcome: Tuple[bool, Any] = (True, {})
        if self.dist.is_chief:
            try:
                loader = self.loader
                if isinstance(loader, DataLoader):
                    loader = loader.sharding.validation_loader(
                        rank=0, num_replicas=1, seed=self.harness.trial_seed
                    )
                metrics = self.trial.evaluate_full_dataset(loader)
                if not isinstance(metrics, dict):
                    raise OutputTypeError(
                        f"{type(self.trial).__name__}.evaluate_full_dataset() must return a dict "
                        f"of metric names to values, got {type(metrics).__name__}"
                    )
                metrics = {n: numpy_metric(v, n, "validation") for n, v in metrics.items()}
                reducers = self.harness.reducers_for(training=False)
                metrics = merge_reducer_metrics(
                    metrics, reducers, [[r.reducer.per_slot_reduce() for r in reducers]], "validation"
                )
                outcome = (True, metrics)
            except Exception as e:
                if self.dist.size == 1:
                    raise
                outcome = (False, e)
        ok, payload = self.dist.broadcast(outcome) if self.dist.size > 1 else outcome
        if not ok:
            if self.dist.is_chief:
                raise payload
            raise RuntimeError(f"evaluate_full_dataset() failed on the chief: {payload!r}")
        return payload
