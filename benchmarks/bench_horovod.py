"""Step time on 2 Horovod workers: det-lite (``distributed_backend: horovod``) vs a hand-written
Horovod loop, on the same MLP and data.

One ``horovodrun`` job (2 workers on this host, Gloo) runs both sides in the same processes,
alternating: det-lite's training loop (``Trainer.fit`` on a ``HorovodContext``: the loop and
engine every det-lite worker runs) and the loop from Horovod's PyTorch guide
(``DistributedSampler``, ``hvd.DistributedOptimizer(backward_passes_per_step=k)``,
``broadcast_parameters``). Same MLP, same synthetic data, same global batch (half per worker),
SGD with momentum. Interleaving in one job keeps both sides under the same machine load, which
matters on a small shared machine.

Step time: wall time between the ends of consecutive training batches on rank 0, median over
the batches after a warm-up; each side runs ``--repeats`` times and the median of the runs is
reported. The ratio is the median over repeats of det-lite's run divided by the baseline run
right after it (paired, so that a change of machine load between repeats cancels out). Both
run with ``OMP_NUM_THREADS=1`` (2 workers on a small machine would otherwise oversubscribe the
cores).

    python benchmarks/bench_horovod.py [--quick] [--json] [--repeats N]

``--json`` prints a list of ``{"name", "det_lite_s", "baseline_s", "ratio", "goal"}``;
``ratio`` is the paired median above and ``goal`` the ratio to stay under.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from determined_lite import pytorch as det  # noqa: E402

GOAL = 1.05
IN, HIDDEN, OUT = 64, 256, 10
GLOBAL_BATCH = 64
DATASET = 4096
SEED = 1234
CASES = (("mlp_2workers_step", 1), ("mlp_2workers_step_aggregation2", 2))


def make_data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(DATASET, IN, generator=g)
    y = torch.randint(0, OUT, (DATASET,), generator=g)
    return torch.utils.data.TensorDataset(x, y)


def make_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, OUT),
    )


def median_step(times: List[float], warmup: int) -> float:
    return statistics.median(b - a for a, b in zip(times[warmup:], times[warmup + 1 :]))


# --- det-lite side ----------------------------------------------------------------------------


class _Timer(det.PyTorchCallback):
    def __init__(self) -> None:
        self.times: List[float] = []

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.times.append(time.perf_counter())


class BenchTrial(det.PyTorchTrial):
    def __init__(self, context: det.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(make_model())
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9))
        self.timer = _Timer()

    def build_training_data_loader(self) -> det.DataLoader:
        return det.DataLoader(make_data(), batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> det.DataLoader:
        return det.DataLoader(torch.utils.data.Subset(make_data(), range(64)), batch_size=32)

    def build_callbacks(self) -> Dict[str, det.PyTorchCallback]:
        return {"timer": self.timer}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y)}


def det_lite_times(dist: Any, batches: int, k: int, workdir: str) -> List[float]:
    info = det.TrialInfo(trial_seed=1, checkpoint_root=os.path.join(workdir, "checkpoints"))
    exp_conf = {"optimizations": {"aggregation_frequency": k}}
    with det.init(
        hparams={"global_batch_size": GLOBAL_BATCH},
        exp_conf=exp_conf,
        distributed=dist,
        enable_tensorboard_logging=False,
        trial_info=info,
    ) as ctx:
        trial = BenchTrial(ctx)
        det.Trainer(trial, ctx).fit(max_length=det.Batch(batches), reporting_period=det.Batch(100))
    return trial.timer.times


# --- baseline side: a hand-written Horovod loop -------------------------------------------------


def baseline_times(batches: int, k: int) -> List[float]:
    import horovod.torch as hvd

    data = make_data()
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False
    )
    loader = torch.utils.data.DataLoader(data, batch_size=GLOBAL_BATCH // hvd.size(), sampler=sampler)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    named = [(f"baseline.{n}", p) for n, p in model.named_parameters()]
    opt = hvd.DistributedOptimizer(opt, named_parameters=named, backward_passes_per_step=k)
    hvd.broadcast_parameters({f"baseline.{n}": t for n, t in model.state_dict().items()}, root_rank=0)
    times: List[float] = []
    done = 0
    while done < batches:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y) / k
            loss.backward()
            if (done + 1) % k == 0:
                opt.step()
                opt.zero_grad()
            times.append(time.perf_counter())
            done += 1
            if done == batches:
                break
    return times


# --- the job --------------------------------------------------------------------------------------


def worker(out_path: str, repeats: int, batches: int, warmup: int) -> None:
    """Runs on each of the 2 workers; rank 0 writes the step times."""
    import horovod.torch as hvd

    from determined_lite.distributed import initialize

    dist = initialize("horovod")
    results: Dict[str, Dict[str, List[float]]] = {name: {"det_lite": [], "baseline": []} for name, _ in CASES}
    with tempfile.TemporaryDirectory(prefix="bench-hvd-") as workdir:
        for _ in range(repeats):
            for name, k in CASES:
                results[name]["det_lite"].append(
                    median_step(det_lite_times(dist, batches, k, workdir), warmup)
                )
                hvd.barrier()
                results[name]["baseline"].append(median_step(baseline_times(batches, k), warmup))
                hvd.barrier()
    if dist.rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.close()


def run_job(repeats: int, batches: int, warmup: int) -> Dict[str, Dict[str, List[float]]]:
    from determined_lite.launch._horovodrun import WRAPPER_MODULE

    with tempfile.TemporaryDirectory(prefix="bench-hvd-") as tmp:
        out = os.path.join(tmp, "times.json")
        argv = [sys.executable, "-u", "-m", WRAPPER_MODULE, "--", "-np", "2", "-H", "localhost:2", "--gloo"]
        argv += ["--disable-cache", sys.executable, "-u", os.path.abspath(__file__), "--worker", out]
        argv += [str(repeats), str(batches), str(warmup)]
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO + (os.pathsep + path if path else "")}
        env.setdefault("DET_LITE_HOME", tmp)
        proc = subprocess.run(argv, env=env, cwd=HERE, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark job failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        with open(out) as f:
            return json.load(f)


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--worker"]:
        worker(args_in[1], int(args_in[2]), int(args_in[3]), int(args_in[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run per side (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print JSON results instead of a table")
    parser.add_argument("--repeats", type=int, default=None, help="runs per side (default 5, --quick 1)")
    args = parser.parse_args(args_in)
    repeats = args.repeats or (1 if args.quick else 5)
    batches, warmup = (80, 20) if args.quick else (400, 50)

    results = run_job(repeats, batches, warmup)
    rows = []
    for name, _ in CASES:
        ours, base = results[name]["det_lite"], results[name]["baseline"]
        # Paired ratio: each det-lite run against the baseline run right after it, so that a
        # change in machine load between repeats cancels out.
        ratio = statistics.median(a / b for a, b in zip(ours, base))
        rows.append(
            {
                "name": name,
                "det_lite_s": statistics.median(ours),
                "baseline_s": statistics.median(base),
                "ratio": ratio,
                "goal": GOAL,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'benchmark':34} {'det-lite ms':>12} {'horovod ms':>12} {'ratio':>7} {'goal':>6}")
        for r in rows:
            print(
                f"{r['name']:34} {r['det_lite_s'] * 1e3:12.3f} {r['baseline_s'] * 1e3:12.3f} "
                f"{r['ratio']:7.3f} {r['goal']:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
