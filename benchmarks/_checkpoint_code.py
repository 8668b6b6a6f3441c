"""Measure 10: a checkpoint's cost with a 10,000-file context against a 1-file context.

Issue 28, item 7: each checkpoint hard-linked and fsynced every file of the context snapshot
(40-50 s per checkpoint with 10,000 small files, 0.15 s with one) and `experiment delete`
removed them one by one. det-lite's side writes a checkpoint of a small state through the
training loop's path (``_checkpoint.write_checkpoint``, made durable at once: ``state_dict.pth``,
``metadata.json``, ``code/``, rename, flush) with a context snapshot of 10,000 files (1,000 with
``--smoke``), then removes it as retention or ``experiment delete`` does (``shutil.rmtree``);
the baseline does the same with a 1-file snapshot. Both sides alternate (ABBA) in this process,
``CHECKPOINTS`` checkpoints per side and repeat (the median counts). The snapshot's code is put
on disk once per snapshot, by its first checkpoint: that is untimed warm-up here, reported as
``seal_s``. The goal is a ratio: the same cost whatever the context holds.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from _common import Row, alternate, log, ratio_row

SAVE_GOAL = 1.25
DELETE_GOAL = 1.5
CHECKPOINTS = 9
# mode -> (files in the big context, repeats)
SIZES: Dict[str, Tuple[int, int]] = {"smoke": (1000, 1), "quick": (10_000, 5), "full": (10_000, 9)}


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    files, reps = SIZES[mode]
    reps = repeats or reps
    top = tempfile.mkdtemp(prefix="bench-ckpt-code-")
    try:
        many, one = _snapshot(top, "many", files), _snapshot(top, "one", 1)
        root = os.path.join(top, "checkpoints")
        big, small = _Side(root, many), _Side(root, one)
        seal_s = big.checkpoint_and_delete()[0]  # the first checkpoint puts the code on disk
        small.checkpoint_and_delete()
        log(f"checkpoint_code: {files} files; the first checkpoint took {seal_s:.2f} s")
        ours, base = alternate(reps, big.checkpoints, small.checkpoints)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    label = f"{files}_files"
    return [
        ratio_row(
            f"checkpoint_code_save_{label}",
            [s for s, _ in ours],
            [s for s, _ in base],
            SAVE_GOAL,
            files=files,
            seal_s=seal_s,
        ),
        ratio_row(
            f"checkpoint_code_delete_{label}",
            [d for _, d in ours],
            [d for _, d in base],
            DELETE_GOAL,
            files=files,
        ),
    ]


def _snapshot(top: str, name: str, files: int) -> str:
    """A context of ``files`` small modules in 100 packages, snapshotted as ``experiment create`` does."""
    from determined_lite.storage import read_context, snapshot_context

    ctx = os.path.join(top, f"{name}-context")
    for i in range(files):
        package = os.path.join(ctx, f"pkg{i % 100:02d}")
        os.makedirs(package, exist_ok=True)
        with open(os.path.join(package, f"m{i:05d}.py"), "w") as f:
            f.write(f"X = {i}\n")
    snapshot = os.path.join(top, f"{name}-snapshot")
    snapshot_context(read_context(ctx), snapshot, source=ctx)
    return snapshot


class _Side:
    """Checkpoints of a small state with the code of one snapshot, each removed after."""

    def __init__(self, root: str, snapshot: str) -> None:
        import torch

        self.root, self.snapshot = root, snapshot
        self.state = {"model": {"w": torch.zeros(256, 256)}, "trainer": {"total_batches": 1}}

    def checkpoint_and_delete(self) -> Tuple[float, float]:
        from determined_lite.pytorch import _checkpoint

        start = time.perf_counter()
        _, path = _checkpoint.write_checkpoint(self.root, self.state, {"total_batches": 1}, self.snapshot)
        written = time.perf_counter()
        shutil.rmtree(path)
        return written - start, time.perf_counter() - written

    def checkpoints(self) -> Tuple[float, float]:
        """Medians over ``CHECKPOINTS`` checkpoints: ``(save, delete)`` seconds."""
        times = [self.checkpoint_and_delete() for _ in range(CHECKPOINTS)]
        return statistics.median(s for s, _ in times), statistics.median(d for _, d in times)
