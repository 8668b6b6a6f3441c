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

Peers (``--peers``): the same cases with Lightning's Trainer, Fabric and Accelerate
(``_peers``), each in a child process of its own, against the same plain loop.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # a peer's child process: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

from _common import DET_LITE, Row, child_env, lockstep_row, log, peer_row, run_child  # noqa: E402

# The MLP step is overhead-bound: det-lite reads a TensorDataset a batch at a time where the
# plain loop's torch DataLoader reads item by item, so det-lite must beat the plain loop.
GOALS = {"mlp": 0.90, "cnn": 1.02}
# mode -> [(kind, cnn width, batches per repeat, warm-up batches, repeats)]
SIZES: Dict[str, List[Tuple[str, int, int, int, int]]] = {
    "smoke": [("mlp", 32, 40, 5, 1)],
    "quick": [("mlp", 32, 800, 50, 5), ("cnn", 16, 50, 10, 3)],
    "full": [("mlp", 32, 3000, 100, 9), ("cnn", 32, 200, 20, 5)],
}


def _name(kind: str, width: int) -> str:
    return "single_mlp_step" if kind == "mlp" else f"single_cnn{width}_step"


def run(
    mode: str, repeats: Optional[int] = None, threads: int = 1, peers: Sequence[str] = ()
) -> List[Row]:
    """det-lite's rows, then (``peers``) the same cases with each peer framework, each peer in
    a child process of its own (its imports and global settings stay out of this one)."""
    rows = _measure(DET_LITE, mode, repeats, threads)
    for framework in peers:
        with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
            out = os.path.join(tmp, "results.json")
            argv = [sys.executable, os.path.abspath(__file__), "--peer", framework, out, mode]
            argv += [str(repeats or 0), str(threads)]
            what = f"the {framework} single-process job"
            run_child(argv, what, timeout=900, env=child_env(threads), cwd=tmp)
            with open(out) as f:
                rows += [peer_row(row, framework) for row in json.load(f)]
    return rows


def _measure(framework: str, mode: str, repeats: Optional[int], threads: int) -> List[Row]:
    import torch
    from _trials import PlainLoop, lockstep, lockstep_aa

    if framework == DET_LITE:
        runner = lockstep
    else:
        import _peers

        def runner(*args, **kwargs):  # type: ignore[no-untyped-def]
            return _peers.lockstep(framework, *args, **kwargs)

    torch.set_num_threads(threads)
    rows = []
    for kind, width, batches, warmup, reps in SIZES[mode]:
        reps = repeats or reps
        name = _name(kind, width)
        log(f"{name} ({framework}): {reps} x {batches} lockstep batches, {threads} torch thread(s)")

        def once(n: int, kind: str = kind, width: int = width, warmup: int = warmup) -> Tuple:
            return runner(kind, n, warmup, lambda: PlainLoop(kind, width), width=width)

        once(warmup + 5)  # untimed: imports, first-use allocations
        results = [once(batches) for _ in range(reps)]
        if torch.get_num_threads() != threads:
            changed = torch.get_num_threads()
            raise RuntimeError(f"{framework} changed torch's threads from {threads} to {changed}")
        extra: Dict[str, object] = {"threads": threads, "batches": batches}
        if kind == "mlp" and framework == DET_LITE:
            aa = [lockstep_aa(lambda: PlainLoop("mlp"), batches, warmup) for _ in range(reps // 2 + 1)]
            extra["aa_ratio"] = lockstep_row("aa", aa, GOALS[kind])["ratio"]
            extra["lead_peers"] = True  # its goal includes the lowest ratio of all frameworks
        rows.append(lockstep_row(name, results, GOALS[kind], **extra))
    return rows


if __name__ == "__main__":  # --peer FRAMEWORK OUT MODE REPEATS THREADS
    _framework, _out, _mode, _repeats, _threads = sys.argv[2:7]
    with open(_out, "w") as _f:
        json.dump(_measure(_framework, _mode, int(_repeats) or None, int(_threads)), _f)
