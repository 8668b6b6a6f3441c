"""Measures 2 and 3: step time on 2 workers, det-lite vs a hand-written Horovod or DDP loop.

One job (``horovodrun`` or ``torch.distributed.run``; 2 workers on this host, Gloo, one torch
thread each) runs both sides in the same processes, in lockstep (``_trials.lockstep``):
det-lite's training loop (``Trainer.fit`` on the engine's ``DistributedContext``: the loop,
wrapping and gradient communication every det-lite worker of that engine runs) and, after each
of its optimizer steps, the same number of batches of the hand-written loop:

- ``horovod``: the loop of Horovod's PyTorch guide (``_trials.HorovodLoop``: DistributedSampler,
  ``hvd.DistributedOptimizer(backward_passes_per_step=k)``, ``broadcast_parameters``);
- ``ddp``: the loop of PyTorch's DDP tutorial (``_trials.DDPLoop``: DistributedSampler,
  ``DDP(model)``, ``no_sync()`` on batches that do not step).

Same MLP, data, global batch (half per worker) and SGD with momentum; cases with
``aggregation_frequency`` 1 and 2. Step times are taken on rank 0. Running both sides in one
job matters: separate jobs drifted (ratios from 0.89 to 1.81 between runs of the same code).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # a worker of the job: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

from _common import Row, child_env, horovodrun_argv, lockstep_row, log, run_child, torchrun_argv  # noqa: E402

GOAL = 1.05


@dataclasses.dataclass(frozen=True)
class Engine:
    backend: str  # determined_lite.distributed.initialize(backend)
    loop: str  # the hand-written loop's class in _trials
    launcher: Callable[[str, Sequence[str]], List[str]]
    prefix: str  # case names: PREFIX and PREFIX_aggregation2
    sizes: Dict[str, Tuple[int, int, int]]  # mode -> (batches per repeat, warm-up batches, repeats)


ENGINES = {
    "horovod": Engine(
        "horovod", "HorovodLoop", horovodrun_argv, "horovod_mlp_2workers_step",
        {"smoke": (30, 5, 1), "quick": (300, 40, 3), "full": (1000, 100, 5)},
    ),
    "ddp": Engine(
        "torch", "DDPLoop", torchrun_argv, "ddp_mlp_2workers_step",
        {"smoke": (30, 5, 1), "quick": (400, 40, 3), "full": (1500, 100, 7)},
    ),
}


def _cases(engine: Engine) -> Tuple[Tuple[str, int], ...]:
    return ((engine.prefix, 1), (f"{engine.prefix}_aggregation2", 2))


def run(mode: str, repeats: Optional[int] = None, engine: str = "ddp") -> List[Row]:
    spec = ENGINES[engine]
    batches, warmup, reps = spec.sizes[mode]
    reps = repeats or reps
    log(f"{engine}: 2 workers, {reps} x {batches} lockstep batches per case")
    with tempfile.TemporaryDirectory(prefix=f"bench-{engine}-") as tmp:
        out = os.path.join(tmp, "results.json")
        argv = spec.launcher(
            os.path.abspath(__file__), ["--worker", engine, out, str(batches), str(warmup), str(reps)]
        )
        run_child(argv, f"the {engine} benchmark job", timeout=900, env=child_env(1), cwd=tmp)
        with open(out) as f:
            results = json.load(f)
    aa = {"aa_ratio": lockstep_row("aa", results["aa"], GOAL)["ratio"]}
    return [
        lockstep_row(name, results[name], GOAL, workers=2, batches=batches, **(aa if k == 1 else {}))
        for name, k in _cases(spec)
    ]


def worker(engine: str, out: str, batches: int, warmup: int, repeats: int) -> None:
    """One of the 2 workers; rank 0 writes ``{case: [(det_lite steps, baseline steps), ...]}``."""
    import _trials
    import torch

    from determined_lite.distributed import initialize

    spec = ENGINES[engine]
    loop = getattr(_trials, spec.loop)
    torch.set_num_threads(1)
    dist = initialize(spec.backend)
    results: Dict[str, list] = {}
    for name, k in _cases(spec):
        _trials.lockstep("mlp", warmup + 5, warmup, lambda k=k: loop("mlp", k), dist, k)  # untimed
        results[name] = [
            _trials.lockstep("mlp", batches, warmup, lambda k=k: loop("mlp", k), dist, k)
            for _ in range(repeats)
        ]
        dist.barrier()
    # Calibration: two identical hand-written loops in lockstep (aggregation 1).
    aa_repeats = repeats // 2 + 1
    results["aa"] = [_trials.lockstep_aa(lambda: loop("mlp", 1), batches, warmup) for _ in range(aa_repeats)]
    if dist.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.close()


if __name__ == "__main__":
    worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
