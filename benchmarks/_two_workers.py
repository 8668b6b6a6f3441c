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

Peers (``--peers``, DDP only): the same cases with Lightning's Trainer, Fabric and Accelerate
(``_peers``) in place of det-lite's loop, one ``torchrun`` job each, against ``DDPLoop``.
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

from _common import (  # noqa: E402
    DET_LITE,
    Row,
    child_env,
    horovodrun_argv,
    lockstep_row,
    log,
    peer_row,
    run_child,
    torchrun_argv,
)


@dataclasses.dataclass(frozen=True)
class Engine:
    backend: str  # determined_lite.distributed.initialize(backend)
    goal: float  # the step-time ratio to stay at or under
    loop: str  # the hand-written loop's class in _trials
    launcher: Callable[[str, Sequence[str]], List[str]]
    prefix: str  # case names: PREFIX and PREFIX_aggregation2
    sizes: Dict[str, Tuple[int, int, int]]  # mode -> (batches per repeat, warm-up batches, repeats)


ENGINES = {
    "horovod": Engine(
        "horovod", 1.05, "HorovodLoop", horovodrun_argv, "horovod_mlp_2workers_step",
        {"smoke": (30, 5, 1), "quick": (300, 40, 3), "full": (1000, 100, 5)},
    ),
    "ddp": Engine(
        "torch", 1.03, "DDPLoop", torchrun_argv, "ddp_mlp_2workers_step",
        {"smoke": (30, 5, 1), "quick": (400, 40, 3), "full": (1500, 100, 7)},
    ),
}


def _cases(engine: Engine) -> Tuple[Tuple[str, int], ...]:
    return ((engine.prefix, 1), (f"{engine.prefix}_aggregation2", 2))


def run(
    mode: str, repeats: Optional[int] = None, engine: str = "ddp", peers: Sequence[str] = ()
) -> List[Row]:
    """det-lite's rows for ``engine``, then (``peers``, DDP only: the peers have no Horovod
    strategy) the same cases with each peer framework, in a ``torchrun`` job of its own."""
    spec = ENGINES[engine]
    batches, warmup, reps = spec.sizes[mode]
    reps = repeats or reps
    rows = []
    for framework in [DET_LITE, *(peers if engine == "ddp" else ())]:
        log(f"{engine} ({framework}): 2 workers, {reps} x {batches} lockstep batches per case")
        with tempfile.TemporaryDirectory(prefix=f"bench-{engine}-") as tmp:
            out = os.path.join(tmp, "results.json")
            args = ["--worker", engine, framework, out, str(batches), str(warmup), str(reps)]
            launcher = spec.launcher if framework == DET_LITE else torchrun_argv
            argv = launcher(os.path.abspath(__file__), args)
            what = f"the {engine} ({framework}) benchmark job"
            run_child(argv, what, timeout=900, env=child_env(1), cwd=tmp)
            with open(out) as f:
                results = json.load(f)
        if framework == DET_LITE:
            aa = {"aa_ratio": lockstep_row("aa", results["aa"], spec.goal)["ratio"]}
            for name, k in _cases(spec):
                extra = aa if k == 1 else {}
                rows.append(lockstep_row(name, results[name], spec.goal, workers=2, batches=batches, **extra))
        else:
            rows += [
                peer_row(lockstep_row(name, results[name], spec.goal, workers=2, batches=batches), framework)
                for name, _ in _cases(spec)
            ]
    return rows


def worker(engine: str, framework: str, out: str, batches: int, warmup: int, repeats: int) -> None:
    """One of the 2 workers; rank 0 writes ``{case: [(det_lite steps, baseline steps), ...]}``
    (``framework``: det-lite, or a peer whose loop replaces det-lite's)."""
    import _trials
    import torch

    spec = ENGINES[engine]
    loop = getattr(_trials, spec.loop)
    torch.set_num_threads(1)
    if framework != DET_LITE:
        return _peer_worker(framework, spec, out, batches, warmup, repeats)

    from determined_lite.distributed import initialize

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


def _peer_worker(framework: str, spec: Engine, out: str, batches: int, warmup: int, repeats: int) -> None:
    """The peer's loop in lockstep with the same hand-written loop (the peer joins the process
    group; the hand-written loop is built after it)."""
    import _peers
    import _trials
    import torch

    loop = getattr(_trials, spec.loop)
    results: Dict[str, list] = {}
    for name, k in _cases(spec):
        _peers.lockstep(framework, "mlp", warmup + 5, warmup, lambda k=k: loop("mlp", k), k=k)  # untimed
        results[name] = [
            _peers.lockstep(framework, "mlp", batches, warmup, lambda k=k: loop("mlp", k), k=k)
            for _ in range(repeats)
        ]
        torch.distributed.barrier()
    if torch.get_num_threads() != 1:
        raise RuntimeError(f"{framework} changed torch's threads from 1 to {torch.get_num_threads()}")
    if torch.distributed.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
