"""Measure 5: checkpoint save and load of a large model, det-lite vs raw ``torch.save``/``torch.load``.

The model is a stack of square ``Linear`` layers: ~100M parameters (400 MB) in the full run,
~25M with ``--quick``, ~1M with ``--smoke`` (the row name says which). det-lite's side is its
real checkpoint path, the one the training loop uses: the state the controller saves (the
context's models/optimizers/schedulers, callbacks, RNG states, trainer counters) and its
metadata go through ``_checkpoint.write_checkpoint(durable=False)`` (temporary directory, ``state_dict.pth``,
``metadata.json``, a copy of the trial's code, atomic rename) and then
``_checkpoint.BackgroundFlush`` (fsync of the files and the directory on a background thread,
as the training loop does while it goes on training); loading is
``_checkpoint.read_checkpoint`` + the harness's ``load_state_dict``, as on resume. The
baseline saves ``model.state_dict()`` with ``torch.save`` to the same filesystem and loads it
with ``torch.load`` + ``load_state_dict``. Both sides alternate (ABBA) in this process; files
are deleted after every repeat.

det-lite's save time is what the training loop waits for: from building the state to the
start of the background flush. The flush is then waited for, untimed, before the load;
``fsync_s`` is how long it took (the baseline never flushes), and ``ratio_with_fsync`` is the
paired ratio had the loop waited for it too (det-lite before the background flush).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from _common import Row, alternate, log, ratio_row

GOAL = 1.10
# mode -> (Linear width, layers, repeats)
SIZES: Dict[str, Tuple[int, int, int]] = {
    "smoke": (512, 4, 1),
    "quick": (2048, 6, 9),
    "full": (4096, 6, 7),
}


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    import torch

    from determined_lite import pytorch as det
    from determined_lite.pytorch import _checkpoint

    width, layers, reps = SIZES[mode]
    reps = repeats or reps
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    params = sum(p.numel() for p in model.parameters())
    label = f"{params / 1e6:.0f}M"
    log(f"checkpoint: {params / 1e6:.1f}M parameters, {reps} repeats per side; free disk {_free_gb():.0f} GB")

    root = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        with det.init(hparams={"global_batch_size": 1}, enable_tensorboard_logging=False) as ctx:
            wrapped = ctx.wrap_model(model)
            ctx.wrap_optimizer(torch.optim.SGD(wrapped.parameters(), lr=0.1))
            det_side = _DetLite(ctx, _checkpoint, root)
            base_side = _Baseline(model, root)
            det_side.save_load()  # untimed warm-up of both paths
            base_side.save_load()
            det_side.fsync_times.clear()
            ours, base = alternate(reps, det_side.save_load, base_side.save_load)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fsync_times = det_side.fsync_times
    extra: Dict[str, Any] = {"params": params, "bytes": det_side.size}
    return [
        ratio_row(
            f"checkpoint_save_{label}",
            [s for s, _ in ours],
            [s for s, _ in base],
            GOAL,
            fsync_s=statistics.median(fsync_times),
            ratio_with_fsync=statistics.median(
                (s + f) / b for (s, _), f, (b, _) in zip(ours, fsync_times, base)
            ),
            **extra,
        ),
        ratio_row(f"checkpoint_load_{label}", [t for _, t in ours], [t for _, t in base], GOAL, **extra),
    ]


def _free_gb() -> float:
    return shutil.disk_usage(tempfile.gettempdir()).free / 2**30


class _DetLite:
    """Save and load through det-lite's checkpoint functions, with the controller's state."""

    def __init__(self, ctx: Any, checkpoint: Any, root: str) -> None:
        import _trials
        import torch

        from determined_lite.pytorch import _rng

        self.ctx, self.ck, self.rng, self.root = ctx, checkpoint, _rng, root
        self.code = os.path.abspath(_trials.__file__)  # plain-Python runs copy the trial's file
        self.torch_version = torch.__version__
        self.size = 0
        self.fsync_times: List[float] = []

    def save_load(self) -> Tuple[float, float]:
        ctx, ck = self.ctx, self.ck
        start = time.perf_counter()
        state = {
            "context": ctx.harness.state_dict(),
            "callbacks": {},
            "rng": [self.rng.capture_rng_state()],
            "trainer": {"total_batches": 1, "trial_seed": ctx.get_trial_seed(), "world_size": 1},
        }
        metadata = {
            "trial_id": None,
            "total_batches": 1,
            "epochs": 1.0,
            "framework": f"torch-{self.torch_version}",
            "hparams": ctx.get_hparams(),
            "trial_class": "_trials:BenchTrial",
            "trial_seed": ctx.get_trial_seed(),
            "created": time.time(),
        }
        uuid, path = ck.write_checkpoint(self.root, state, metadata, self.code, durable=False)
        flush = ck.BackgroundFlush()
        flush.start(uuid, path)
        saved = time.perf_counter()  # the training loop goes on from here
        flush.wait()
        flush.close()
        self.fsync_times.append(time.perf_counter() - saved)
        self.size = os.path.getsize(os.path.join(path, ck.STATE_FILE))
        del state
        start_load = time.perf_counter()
        loaded, _ = ck.read_checkpoint(path, map_location="cpu")
        ctx.harness.load_state_dict(loaded["context"])
        loaded_at = time.perf_counter()
        del loaded
        shutil.rmtree(path)
        return saved - start, loaded_at - start_load


class _Baseline:
    """``torch.save(model.state_dict())`` and ``torch.load`` + ``load_state_dict``."""

    def __init__(self, model: Any, root: str) -> None:
        self.model, self.path = model, os.path.join(root, "raw.pth")

    def save_load(self) -> Tuple[float, float]:
        import torch

        start = time.perf_counter()
        torch.save(self.model.state_dict(), self.path)
        saved = time.perf_counter()
        state = torch.load(self.path, map_location="cpu")
        self.model.load_state_dict(state)
        loaded = time.perf_counter()
        del state
        os.remove(self.path)
        return saved - start, loaded - saved
