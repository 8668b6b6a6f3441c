"""Measure 1: one process on CPU, step time of det-lite vs a plain PyTorch loop.

Two models: a small MLP (a step is about a millisecond, so the harness's per-batch work shows)
and a CNN (compute-dominated; ``--quick`` uses a narrower one). The det-lite side is the real
harness, ``init()`` + ``Trainer(trial).fit()``; the baseline is a hand-written loop with the
same model, data, batch size and optimizer and a torch ``DataLoader`` (``_trials.PlainLoop``).
Both use the same fixed number of torch threads (``--threads``, default 1).

The two run in lockstep, batch by batch, in this process (``_trials.lockstep``): a callback at
the end of every det-lite training batch runs one baseline batch and timestamps it. Machine
load, which on a small shared machine changes by tens of percent within seconds, hits both
sides of every pair alike. Per repeat: the median over batches of the per-batch ratio (warm-up
batches left out); reported: the median over repeats (see ``_common.lockstep_row``).

Calibration (MLP only): ``aa_ratio`` is the same statistic for two identical plain loops
alternating batch by batch (``_trials.lockstep_aa``); its distance from 1 is about how precise
the ratio is on this machine (on the 2-core development box: 1-3 %).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from _common import Row, lockstep_row, log

# The MLP step is overhead-bound: det-lite reads a TensorDataset a batch at a time where the
# plain loop's torch DataLoader reads item by item, so det-lite must beat the plain loop.
GOALS = {"mlp": 0.90, "cnn": 1.02}
# mode -> [(kind, cnn width, batches per repeat, warm-up batches, repeats)]
SIZES: Dict[str, List[Tuple[str, int, int, int, int]]] = {
    "smoke": [("mlp", 32, 40, 5, 1)],
    "quick": [("mlp", 32, 800, 50, 5), ("cnn", 16, 50, 10, 3)],
    "full": [("mlp", 32, 3000, 100, 9), ("cnn", 32, 200, 20, 5)],
}


def run(mode: str, repeats: Optional[int] = None, threads: int = 1) -> List[Row]:
    import torch
    from _trials import PlainLoop, lockstep, lockstep_aa

    torch.set_num_threads(threads)
    rows = []
    for kind, width, batches, warmup, reps in SIZES[mode]:
        reps = repeats or reps
        name = "single_mlp_step" if kind == "mlp" else f"single_cnn{width}_step"
        log(f"{name}: {reps} x {batches} lockstep batches, {threads} torch thread(s)")

        def once(n: int, kind: str = kind, width: int = width, warmup: int = warmup) -> Tuple:
            return lockstep(kind, n, warmup, lambda: PlainLoop(kind, width), width=width)

        once(warmup + 5)  # untimed: imports, first-use allocations
        results = [once(batches) for _ in range(reps)]
        extra = {"threads": threads, "batches": batches}
        if kind == "mlp":
            aa = [lockstep_aa(lambda: PlainLoop("mlp"), batches, warmup) for _ in range(reps // 2 + 1)]
            extra["aa_ratio"] = lockstep_row("aa", aa, GOALS[kind])["ratio"]
        rows.append(lockstep_row(name, results, GOALS[kind], **extra))
    return rows
