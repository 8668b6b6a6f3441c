"""Restoring a trial from a checkpoint: resuming its own latest one, or a warm start from
another; det-lite's checkpoints and Determined's (``_determined_ckpt``) alike."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, Optional

from determined_lite.pytorch import _checkpoint, _determined_ckpt
from determined_lite.pytorch._callback import CallbackList
from determined_lite.pytorch._harness import TrialHarness
from determined_lite.pytorch._hooks import Hook

logger = logging.getLogger("determined_lite")


@dataclasses.dataclass
class Restored:
    """Where a run starts: its first batch, the checkpoint it came from, this worker's random
    state, the batch of the checkpoint it resumed (none to write again there)."""

    start: int = 0
    checkpoint_uuid: Optional[str] = None
    rng_state: Optional[Dict[str, Any]] = None
    checkpoint_batch: Optional[int] = None
    best_validation_restored: bool = False  # the trial's best searcher metric came back


def resume_batches(path: str) -> int:
    """Batches trained in the checkpoint at ``path`` (det-lite's or Determined's)."""
    if _determined_ckpt.is_determined_checkpoint(path):
        return _determined_ckpt.batches_trained(path)
    return _checkpoint.checkpoint_batches(path)


def _uuid_of(path: str, metadata: Dict[str, Any]) -> str:
    return metadata.get("uuid", os.path.basename(os.path.normpath(path)))


class Restorer:
    """Loads a checkpoint into one worker's harness and callbacks, firing the load hooks."""

    def __init__(self, harness: TrialHarness, callbacks: CallbackList) -> None:
        self.harness = harness
        self.callbacks = callbacks
        self.rank = harness.distributed.rank

    def resume(self, path: str) -> Restored:
        """Continue the trial from its checkpoint at ``path`` (progress, seed and best metric)."""
        self.callbacks.call(Hook.ON_BEFORE_LOAD_CHECKPOINT, path)
        if _determined_ckpt.is_determined_checkpoint(path):
            return self._load_determined(path, warm=False)
        state, metadata = _checkpoint.read_checkpoint(path, map_location="cpu")
        self.callbacks.call(Hook.ON_CHECKPOINT_LOAD_START, state)
        self._load(state["context"], state.get("callbacks", {}))
        trainer = state["trainer"]
        self.harness.trial_seed = trainer["trial_seed"]
        self.harness.state.best_validation = trainer.get("best_validation")
        start = trainer["total_batches"]
        logger.info("resuming from checkpoint %s at batch %d", path, start)
        rng = state["rng"]
        return Restored(start, _uuid_of(path, metadata), rng[self.rank % len(rng)], start, True)

    def warm_start(self, path: str) -> Restored:
        """Start a new trial from ``path`` as Determined's warm start does (the source checkpoint
        is loaded like the trial's own latest one, with the trial's progress at batch 0): weights,
        optimizer, LR scheduler and scaler states, callbacks' states and random states."""
        self.callbacks.call(Hook.ON_BEFORE_LOAD_CHECKPOINT, path)
        if _determined_ckpt.is_determined_checkpoint(path):
            return self._load_determined(path, warm=True)
        state, metadata = _checkpoint.read_checkpoint(path, map_location="cpu")
        self.callbacks.call(Hook.ON_CHECKPOINT_LOAD_START, state)
        self._load(state["context"], state.get("callbacks", {}), steps=0)
        logger.info("warm start from checkpoint %s", path)
        rng = state["rng"]
        return Restored(0, _uuid_of(path, metadata), rng[self.rank % len(rng)])

    def _load(self, context: Dict[str, Any], callbacks: Dict[str, Any], steps: Optional[int] = None) -> None:
        """Restore the harness (each optimizer's step count set to ``steps`` when given), then
        the callbacks."""
        self.harness.load_state_dict(context)
        if steps is not None:
            for wrapped in self.harness.optimizers:
                wrapped.steps = steps  # a warm-started trial counts its own optimizer steps
        self.callbacks.load_state_dict(callbacks)

    def _load_determined(self, path: str, warm: bool) -> Restored:
        """Load a checkpoint written by Determined; resuming continues at its
        ``batches_trained``, a warm start at batch 0."""
        ckpt = _determined_ckpt.read_determined_checkpoint(path)
        self.callbacks.call(Hook.ON_CHECKPOINT_LOAD_START, ckpt.state)
        harness = self.harness
        start = 0 if warm else ckpt.batches_trained
        context = _determined_ckpt.context_state(
            ckpt,
            **harness.wrapped_counts(),
            amp_scaler=harness.precision.amp_scaler is not None,
            optimizer_steps=start // harness.state.aggregation_frequency,
        )
        self._load(context, ckpt.state.get("callbacks") or {})
        logger.info(
            "%s Determined checkpoint %s%s",
            "warm start from" if warm else "resuming from",
            path,
            "" if warm else f" at batch {start}",
        )
        return Restored(start, ckpt.uuid, _determined_ckpt.rng_state(ckpt), None if warm else start)
