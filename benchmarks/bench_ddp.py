"""Step time on 2 torch.distributed workers: det-lite (``distributed_backend: torch``) vs a
hand-written DistributedDataParallel loop, on the same MLP and data.

Both sides start 2 workers on this host with ``torch.distributed.run`` (gloo on CPU), train the
same MLP (64 → 256 → 256 → 10) on the same synthetic data with the same global batch (half per
worker), SGD with momentum, gradients through DDP; the baseline is the loop of PyTorch's DDP
tutorial (``DistributedSampler``, ``DDP(model)``, ``no_sync()`` on the batches that do not step
when ``k > 1``). det-lite runs through its real launcher (``determined_lite.launch.run_trial``),
so the measured step includes everything the harness does per batch (callbacks, metric
bookkeeping, a metric all-gather every 100 batches).

Step time: wall time between the ends of consecutive training batches on rank 0, median over
the batches after a warm-up; each side runs ``--repeats`` times (alternating) and the median of
the runs is reported. Both sides run with ``OMP_NUM_THREADS=1``.

    python benchmarks/bench_ddp.py [--quick] [--json] [--repeats N]

``--json`` prints a list of ``{"name", "det_lite_s", "baseline_s", "ratio", "goal"}``;
``ratio = det_lite_s / baseline_s`` and ``goal`` is the ratio to stay under.
"""

from __future__ import annotations

import argparse
import contextlib
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
GOAL = 1.05
IN, HIDDEN, OUT = 64, 256, 10
GLOBAL_BATCH = 64
DATASET = 4096
SEED = 1234
SLOTS = 2


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


def _write_times(path: str, times: List[float]) -> None:
    with open(path, "w") as f:
        json.dump(times, f)


# --- det-lite side: a trial ------------------------------------------------------------------------

try:
    from determined_lite import pytorch as det

    class _Timer(det.PyTorchCallback):
        """Time at the end of every training batch; rank 0 writes them at shutdown."""

        def __init__(self, path: str, rank: int) -> None:
            self.path, self.rank = path, rank
            self.times: List[float] = []

        def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
            self.times.append(time.perf_counter())

        def on_trial_shutdown(self) -> None:
            if self.rank == 0:
                _write_times(self.path, self.times)

    class DDPBenchTrial(det.PyTorchTrial):
        def __init__(self, context: det.PyTorchTrialContext) -> None:
            self.context = context
            self.model = context.wrap_model(make_model())
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9))
            self.timer = _Timer(context.get_hparam("times_path"), context.distributed.rank)

        def build_training_data_loader(self) -> det.DataLoader:
            return det.DataLoader(
                make_data(), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
            )

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

except ImportError:  # the baseline workers need only torch
    pass


def run_det_lite(batches: int, k: int, workdir: str) -> List[float]:
    from determined_lite.launch import WorkerSpec, run_trial

    times_path = os.path.join(workdir, "det_lite_times.json")
    spec = WorkerSpec(
        entrypoint="bench_ddp:DDPBenchTrial",
        context_dir=HERE,
        exp_conf={"optimizations": {"aggregation_frequency": k}, "scheduling_unit": 100},
        hparams={"global_batch_size": GLOBAL_BATCH, "times_path": times_path},
        result_path=os.path.join(workdir, "result.json"),
        max_length={"batches": batches},
        trial_seed=1,
        checkpoint_root=os.path.join(workdir, "checkpoints"),
        tensorboard_path=os.path.join(workdir, "tensorboard"),
        backend="torch",
        slots=SLOTS,
    )
    lines: List[str] = []
    env = {**_env(), "DET_LITE_HOME": os.path.join(workdir, "home")}
    code, result = run_trial(spec, os.path.join(workdir, "spec.json"), env=env, on_output=lines.append)
    if code != 0:
        raise RuntimeError(f"det-lite run failed ({result.error}):\n" + "\n".join(lines[-30:]))
    with open(times_path) as f:
        return json.load(f)


# --- baseline side: a hand-written DDP loop --------------------------------------------------------


def baseline_worker(batches: int, k: int, times_path: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    data = make_data()
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=size, rank=rank, shuffle=True
    )
    loader = torch.utils.data.DataLoader(data, batch_size=GLOBAL_BATCH // size, sampler=sampler)
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times: List[float] = []
    done, epoch = 0, 0
    while done < batches:
        sampler.set_epoch(epoch)
        for x, y in loader:
            update = (done + 1) % k == 0
            with contextlib.nullcontext() if update else model.no_sync():
                loss = torch.nn.functional.cross_entropy(model(x), y) / k
                loss.backward()
            if update:
                opt.step()
                opt.zero_grad()
            times.append(time.perf_counter())
            done += 1
            if done == batches:
                break
        epoch += 1
    if rank == 0:
        _write_times(times_path, times)
    dist.destroy_process_group()


def run_baseline(batches: int, k: int, workdir: str) -> List[float]:
    times_path = os.path.join(workdir, "baseline_times.json")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    argv += ["--nproc-per-node", str(SLOTS), "--max-restarts", "0", "--monitor-interval", "0.1"]
    argv += [os.path.abspath(__file__), "--baseline-worker", str(batches), str(k), times_path]
    proc = subprocess.run(argv, env={**os.environ, **_env()}, cwd=HERE, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"baseline run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(times_path) as f:
        return json.load(f)


# --- measurement -----------------------------------------------------------------------------------


def _env() -> Dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": REPO + (os.pathsep + path if path else ""), "OMP_NUM_THREADS": "1"}


def median_step(times: List[float], warmup: int) -> float:
    """Median time between the ends of consecutive batches after ``warmup`` batches."""
    steps = [b - a for a, b in zip(times[warmup:], times[warmup + 1 :])]
    return statistics.median(steps)


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--baseline-worker"]:
        baseline_worker(int(args_in[1]), int(args_in[2]), args_in[3])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run per side (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print JSON results instead of a table")
    parser.add_argument("--repeats", type=int, default=None, help="runs per side (default 3, --quick 1)")
    args = parser.parse_args(args_in)
    repeats = args.repeats or (1 if args.quick else 3)
    batches, warmup = (80, 20) if args.quick else (400, 50)

    rows = []
    for name, k in (("ddp_mlp_2workers_step", 1), ("ddp_mlp_2workers_step_aggregation2", 2)):
        ours, base = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="bench-ddp-") as workdir:
                ours.append(median_step(run_det_lite(batches, k, workdir), warmup))
                base.append(median_step(run_baseline(batches, k, workdir), warmup))
        det_s, base_s = statistics.median(ours), statistics.median(base)
        rows.append(
            {"name": name, "det_lite_s": det_s, "baseline_s": base_s, "ratio": det_s / base_s, "goal": GOAL}
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'benchmark':38} {'det-lite ms':>12} {'DDP loop ms':>12} {'ratio':>7} {'goal':>6}")
        for r in rows:
            print(
                f"{r['name']:38} {r['det_lite_s'] * 1e3:12.3f} {r['baseline_s'] * 1e3:12.3f} "
                f"{r['ratio']:7.3f} {r['goal']:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
