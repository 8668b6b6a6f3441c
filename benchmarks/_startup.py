"""Measure 7: ``det-lite experiment create`` to the first trained batch, 1 slot (absolute, reported).

A tiny trial (a linear model on 64 records) in a temporary context directory writes
``time.time()`` at the end of its first ``train_batch``; the benchmark starts
``det-lite experiment create CONFIG CONTEXT`` (the console script, in the foreground, with a
fresh ``$DET_LITE_HOME``) and takes the difference from its own ``time.time()`` just before
the launch. Median over runs; ``total_s`` is the median wall time of the whole command
(config, store, worker start, 4 batches, validation, checkpoint, summary, exit).

For scale, ``floor_s`` is the same measurement for a plain ``python script.py`` that imports
torch, builds the same model, data and loader and trains one batch: the part of the startup
det-lite cannot remove (on a small machine, mostly ``import torch``). Runs of the two
alternate.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Dict, List, Optional, Tuple

from _cli import det_lite_command
from _common import Row, absolute_row, alternate, child_env, log

RUNS: Dict[str, int] = {"smoke": 1, "quick": 2, "full": 6}

TRIAL = textwrap.dedent(
    '''
    """A tiny trial that stamps the wall time at the end of its first training batch."""
    import time

    import torch

    from determined_lite.pytorch import DataLoader, PyTorchTrial


    class StartupTrial(PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(8, 2))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))
            self.stamped = False

        def _data(self):
            g = torch.Generator().manual_seed(0)
            x, y = torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g)
            return torch.utils.data.TensorDataset(x, y)

        def build_training_data_loader(self):
            return DataLoader(self._data(), batch_size=self.context.get_per_slot_batch_size())

        def build_validation_data_loader(self):
            return DataLoader(self._data(), batch_size=16)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            if not self.stamped:
                self.stamped = True
                with open(self.context.get_hparam("stamp_path"), "w") as f:
                    f.write(repr(time.time()))
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y)}
    '''
)

FLOOR = textwrap.dedent(
    """
    import sys
    import time

    import torch

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        break
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    """
)

CONFIG = """\
name: startup-bench
entrypoint: model_def:StartupTrial
hyperparameters:
  global_batch_size: 16
  stamp_path: {stamp}
searcher:
  name: single
  metric: val_loss
  max_length:
    batches: 4
resources:
  slots_per_trial: 1
reproducibility:
  experiment_seed: 1
"""


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    runs = repeats or RUNS[mode]
    log(f"startup: {runs} run(s) each of det-lite experiment create (1 slot) and of a plain torch script")
    if mode == "full":
        _once()  # warms the page cache (in --quick, the measures before this one did)
        _floor()
    ours, floor = alternate(runs, _once, _floor)
    return [
        absolute_row(
            "startup_to_first_batch_1slot",
            [first for first, _ in ours],
            None,
            total_s=statistics.median(whole for _, whole in ours),
            floor_s=statistics.median(floor),
            note=f"plain torch script: {statistics.median(floor):.2f} s",
        )
    ]


def _env(tmp: str) -> Dict[str, str]:
    env = child_env(threads=int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    env["DET_LITE_HOME"] = os.path.join(tmp, "home")
    return env


def _launch(argv: List[str], stamp: str, env: Dict[str, str], cwd: str) -> Tuple[float, float]:
    """Run ``argv``; ``(seconds to the stamp it writes, seconds to its exit)``."""
    start = time.time()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    whole = time.time() - start
    if proc.returncode != 0 or not os.path.exists(stamp):
        raise RuntimeError(
            f"{' '.join(argv[:3])} ... failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    with open(stamp) as f:
        return float(f.read()) - start, whole


def _once() -> Tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        context = os.path.join(tmp, "context")
        os.makedirs(context)
        with open(os.path.join(context, "model_def.py"), "w") as f:
            f.write(TRIAL)
        stamp = os.path.join(tmp, "first_batch.txt")
        config = os.path.join(tmp, "experiment.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(stamp=stamp))
        argv = det_lite_command() + ["experiment", "create", config, context]
        return _launch(argv, stamp, _env(tmp), tmp)


def _floor() -> float:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        script = os.path.join(tmp, "plain.py")
        with open(script, "w") as f:
            f.write(FLOOR)
        stamp = os.path.join(tmp, "first_batch.txt")
        return _launch([sys.executable, script, stamp], stamp, _env(tmp), tmp)[0]
