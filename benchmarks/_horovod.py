"""Measure 2: step time on 2 Horovod workers, det-lite vs a hand-written Horovod loop.

One ``horovodrun`` job (2 workers on this host, Gloo, one torch thread each) runs both sides
in the same processes, in lockstep (``_trials.lockstep``): det-lite's training loop
(``Trainer.fit`` on a ``HorovodContext``, the loop and engine every det-lite Horovod worker
runs) and, after each of its batches, one batch of the loop from Horovod's PyTorch guide
(``_trials.HorovodLoop``: DistributedSampler, ``hvd.DistributedOptimizer``,
``broadcast_parameters``). Same MLP, data, global batch (half per worker) and SGD with
momentum; cases with ``aggregation_frequency`` 1 and 2 (``backward_passes_per_step``).
Step times are taken on rank 0.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

if __name__ == "__main__":  # a horovodrun worker: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

from _common import Row, child_env, horovodrun_argv, lockstep_row, log, run_child  # noqa: E402

GOAL = 1.05
CASES = (("horovod_mlp_2workers_step", 1), ("horovod_mlp_2workers_step_aggregation2", 2))
# mode -> (batches per repeat, warm-up batches, repeats)
SIZES: Dict[str, Tuple[int, int, int]] = {"smoke": (30, 5, 1), "quick": (300, 40, 3), "full": (1000, 100, 5)}


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    batches, warmup, reps = SIZES[mode]
    reps = repeats or reps
    log(f"horovod: 2 workers, {reps} x {batches} lockstep batches per case")
    with tempfile.TemporaryDirectory(prefix="bench-hvd-") as tmp:
        out = os.path.join(tmp, "results.json")
        argv = horovodrun_argv(
            os.path.abspath(__file__), ["--worker", out, str(batches), str(warmup), str(reps)]
        )
        run_child(argv, "the horovodrun benchmark job", timeout=900, env=child_env(1), cwd=tmp)
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
    from _trials import HorovodLoop, lockstep, lockstep_aa

    from determined_lite.distributed import initialize

    torch.set_num_threads(1)
    dist = initialize("horovod")
    results: Dict[str, list] = {}
    for name, k in CASES:
        lockstep("mlp", warmup + 5, warmup, lambda k=k: HorovodLoop("mlp", k), dist, k)  # untimed
        results[name] = [
            lockstep("mlp", batches, warmup, lambda k=k: HorovodLoop("mlp", k), dist, k)
            for _ in range(repeats)
        ]
        dist.barrier()
    # Calibration: two identical hand-written loops in lockstep (aggregation 1).
    aa_repeats = repeats // 2 + 1
    results["aa"] = [lockstep_aa(lambda: HorovodLoop("mlp", 1), batches, warmup) for _ in range(aa_repeats)]
    if dist.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.close()


if __name__ == "__main__":
    worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
