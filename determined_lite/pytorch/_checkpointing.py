"""Saving a trial's checkpoints from the loop: the state every worker contributes, the metadata
and the write on the chief, the background flush, and the hooks that announce each step."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Dict, Optional, Tuple

import torch

import determined_lite
from determined_lite.pytorch import _checkpoint, _rng
from determined_lite.pytorch._callback import CallbackList
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._harness import TrialInfo
from determined_lite.pytorch._hooks import Hook
from determined_lite.pytorch._schedule import Plan
from determined_lite.storage import STORE_KEY

logger = logging.getLogger("determined_lite")


def trial_class_spec(trial_class: type, code_source: Optional[str]) -> str:
    """``module:qualname`` of the trial class, as the checkpoint's metadata records it for
    ``load_trial_from_checkpoint_path``. A class defined in the script the trial runs
    (``__main__``) is recorded under the name that script has as a module of the checkpoint's
    ``code/`` (``train`` for ``python3 train.py``, ``pkg.train`` for ``python3 -m pkg.train``),
    which a later process can import; ``__main__`` stays when the script is not one of its files."""
    module = trial_class.__module__
    if module == "__main__":
        module = _main_module_name(code_source) or module
    return f"{module}:{trial_class.__qualname__}"


def _main_module_name(code_source: Optional[str]) -> Optional[str]:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in (None, "__main__"):
        return str(spec.name)
    path = getattr(main, "__file__", None)
    if not path or not code_source or not path.endswith(".py"):
        return None
    root = code_source if os.path.isdir(code_source) else os.path.dirname(code_source)
    rel = os.path.relpath(os.path.realpath(os.path.abspath(path)), os.path.realpath(root))
    parts = rel[: -len(".py")].split(os.sep)
    return ".".join(parts) if all(p.isidentifier() for p in parts) else None


class CheckpointWriter:
    """Writes one trial's checkpoints (on the chief), flushes each to disk in the background
    while training goes on, and announces it (``on_checkpoint_upload_end``) once on disk."""

    def __init__(
        self,
        context: PyTorchTrialContext,
        callbacks: CallbackList,
        plan: Plan,
        trial_class: str,
        root: str,
        code_source: Optional[str],
        trial_info: Optional[TrialInfo] = None,
    ) -> None:
        self.context = context
        self.harness = context.harness
        self.dist = context.distributed
        self.callbacks = callbacks
        self.plan = plan
        self.trial_class = trial_class  # module:qualname, in the metadata
        self.root = root
        self.code_source = code_source
        self.trial_info = trial_info  # the ids checkpoints carry; None: the context's
        self.last_batch: Optional[int] = None  # the batch of the last checkpoint written or resumed
        self._flush = _checkpoint.BackgroundFlush()

    def on_disk(self) -> None:
        """Wait for the last checkpoint's background flush, then announce it (chief only)."""
        checkpoint_uuid = self._flush.wait()
        if checkpoint_uuid is not None:
            self.callbacks.call(Hook.ON_CHECKPOINT_UPLOAD_END, checkpoint_uuid)

    def close(self) -> None:
        self._flush.close()

    def save(self, done: int, metrics: Optional[Dict[str, Any]]) -> Tuple[Optional[str], Optional[str]]:
        """Checkpoint the trial after ``done`` batches (``metrics``: the validation at ``done``);
        every worker calls it and gets the checkpoint's (uuid, path)."""
        self.on_disk()
        state = self._state(done)
        uuid = path = None
        if self.dist.is_chief:
            self.callbacks.call(Hook.ON_CHECKPOINT_SAVE_START, state)
            # Written complete and renamed into place now; flushed to disk while training goes on,
            # and announced with on_checkpoint_upload_end at the next report, checkpoint or end.
            uuid, path = _checkpoint.write_checkpoint(
                self.root, state, self._metadata(done, metrics), self.code_source, durable=False
            )
            self.callbacks.call(Hook.ON_CHECKPOINT_WRITE_END, path)
            self.callbacks.call(Hook.ON_CHECKPOINT_END, path)
            self._flush.start(uuid, path)
        uuid, path = self.dist.broadcast((uuid, path)) if self.dist.size > 1 else (uuid, path)
        self.last_batch = done
        return uuid, path

    def _state(self, done: int) -> Dict[str, Any]:
        """What a checkpoint holds: the harness's objects, callbacks, every worker's RNG state."""
        harness = self.harness
        return {
            "context": harness.state_dict(),
            "callbacks": self.callbacks.state_dict(),
            "rng": self.dist.allgather(_rng.capture_rng_state()),
            "trainer": {
                "total_batches": done,
                "trial_seed": harness.trial_seed,
                "best_validation": harness.state.best_validation,
                "world_size": self.dist.size,
            },
        }

    def _metadata(self, done: int, metrics: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        ctx, harness, plan = self.context, self.harness, self.plan
        info = self.trial_info or harness.trial_info  # a plain-Python run's: its local record's
        return {
            "trial_id": info.trial_id,
            "experiment_id": info.experiment_id,
            "total_batches": done,
            "epochs": done / plan.epoch_length,
            "framework": f"torch-{torch.__version__}",
            "determined_lite_version": determined_lite.__version__,
            "hparams": ctx.get_hparams(),
            "experiment_config": ctx.get_experiment_config(),
            "trial_class": self.trial_class,
            "trial_seed": harness.trial_seed,
            "aggregation_frequency": plan.aggregation_frequency,
            "validation_metrics": metrics,
            "created": time.time(),
            STORE_KEY: info.store_path,
        }
