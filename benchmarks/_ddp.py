"""Measure 3: step time on 2 torch.distributed workers, det-lite vs a hand-written DDP loop.

One ``torch.distributed.run`` job (2 workers on this host, gloo, one torch thread each) runs
both sides in the same processes, in lockstep (``_trials.lockstep``): det-lite's training loop
(``Trainer.fit`` on a ``TorchDistributedContext``: the loop, DDP wrapping and ``no_sync`` every
det-lite torch worker runs) and, after each of its batches, one batch of the loop from
PyTorch's DDP tutorial (``_trials.DDPLoop``: DistributedSampler, ``DDP(model)``, ``no_sync()``
on batches that do not step). Same MLP, data, global batch (half per worker) and SGD with
momentum; cases with ``aggregation_frequency`` 1 and 2. Step times are taken on rank 0.
Running both in one job matters: separate jobs drifted (ratios from 0.89 to 1.81 between runs).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

if __name__ == "__main__":  # a torchrun worker: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

from _common import Row, child_env, lockstep_row, log, run_child, torchrun_argv  # noqa: E402

GOAL = 1.05
CASES = (("ddp_mlp_2workers_step", 1), ("ddp_mlp_2workers_step_aggregation2", 2))
# mode -> (batches per repeat, warm-up batches, repeats)
SIZES: Dict[str, Tuple[int, int, int]] = {"smoke": (30, 5, 1), "quick": (400, 40, 3), "full": (1500, 100, 7)}


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    batches, warmup, reps = SIZES[mode]
    reps = repeats or reps
    log(f"ddp: 2 workers, {reps} x {batches} lockstep batches per case")
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        out = os.path.join(tmp, "results.json")
        argv = torchrun_argv(
            os.path.abspath(__file__), ["--worker", out, str(batches), str(warmup), str(reps)]
        )
        run_child(argv, "the torch.distributed benchmark job", timeout=900, env=child_env(1), cwd=tmp)
        with open(out) as f:
            results = json.load(f)
    aa = {"aa_ratio": lockstep_row("aa", results["aa"], GOAL)["ratio"]}
    return [
        lockstep_row(name, results[name], GOAL, workers=2, batches=batches, **(aa if k == 1 else {}))
        for name, k in CASES
    ]


def worker(out: str, batches: int, warmup: int, repeats: int) -> None:
    """One of the 2 workers; rank 0 writes ``{case: [(det_lite steps, baseline steps), ...]}``."""
    import torch
    from _trials import DDPLoop, lockstep, lockstep_aa

    from determined_lite.distributed import initialize

    torch.set_num_threads(1)
    dist = initialize("torch")
    results: Dict[str, list] = {}
    for name, k in CASES:
        lockstep("mlp", warmup + 5, warmup, lambda k=k: DDPLoop("mlp", k), dist, k)  # untimed
        results[name] = [
            lockstep("mlp", batches, warmup, lambda k=k: DDPLoop("mlp", k), dist, k) for _ in range(repeats)
        ]
        dist.barrier()
    # Calibration: two identical hand-written loops in lockstep (aggregation 1).
    aa_repeats = repeats // 2 + 1
    results["aa"] = [lockstep_aa(lambda: DDPLoop("mlp", 1), batches, warmup) for _ in range(aa_repeats)]
    if dist.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.close()


if __name__ == "__main__":
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
