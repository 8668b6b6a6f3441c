"""Measure 12's multi-slot start-up (issue 27, measure 2): a 2-slot trial of each engine, from
the runner writing the run's spec to the end of its first batch on every rank.

One ``single`` trial of ``_search_model`` (8 batches) per engine (``torch``: torchrun;
``horovod``: horovodrun on Gloo), ``RUNS[mode]`` times, through ``det-lite experiment create``
with a fresh ``$DET_LITE_HOME``. Reported against ``python -c "import torch"`` (no goal: the
issue's 0.3 s goal is for 1 slot; these start an engine's launcher and a process group). An
engine that is not installed gets no row.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import tempfile
from typing import Any, Dict, List

import yaml
from _cli import det_lite_command
from _common import Row, absolute_row, child_env, log, run_child

RUNS = {"smoke": 1, "quick": 2, "full": 4}
ENGINES = {"torch": "torch", "horovod": "horovod"}


def _config(engine: str, data: str, stamps: str) -> Dict[str, Any]:
    return {
        "name": f"startup-2slots-{engine}",
        "entrypoint": "model_def:SearchTrial",
        "hyperparameters": {
            "global_batch_size": 64,
            "hidden": 64,
            "lr": 0.01,
            "dropout": 0.0,
            "data_path": data,
            "stamp_dir": stamps,
        },
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 8}},
        "resources": {"slots_per_trial": 2, "distributed_backend": engine},
        "max_restarts": 0,
    }


def _one(engine: str, tmp: str, context: str, data: str) -> float:
    """Seconds from the spec's write to the last rank's first batch, for one 2-slot trial."""
    home = tempfile.mkdtemp(prefix=f"home-{engine}-", dir=tmp)
    stamps = tempfile.mkdtemp(prefix="stamps-", dir=tmp)
    path = os.path.join(home, "trial.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(_config(engine, data, stamps), f)
    env = child_env(threads=1, DET_LITE_HOME=home)
    run_child(det_lite_command() + ["experiment", "create", path, context], f"2 slots {engine}", 600, env=env)
    lines = []
    for stamp in glob.glob(os.path.join(stamps, "*.jsonl")):
        with open(stamp) as f:
            lines += [json.loads(line) for line in f]
    if len(lines) != 2:
        raise RuntimeError(f"2 slots {engine}: expected a first-batch stamp per rank, got {len(lines)}")
    return max(s["first_batch"] for s in lines) - min(s["spec"] for s in lines)


def rows(mode: str, tmp: str, context: str, data: str, torch_s: float) -> List[Row]:
    """One row per installed engine: ``search_trial_startup_2slots_<engine>``."""
    out: List[Row] = []
    for engine, module in ENGINES.items():
        if importlib.util.find_spec(module) is None:
            log(f"2 slots {engine}: {module} is not installed; no row")
            continue
        values = [_one(engine, tmp, context, data) for _ in range(RUNS[mode])]
        log(f"2 slots {engine}: " + ", ".join(f"{v:.2f} s" for v in values))
        out.append(
            absolute_row(
                f"search_trial_startup_2slots_{engine}",
                values,
                None,
                bare_import_torch_s=torch_s,
                note=f"runner's spec -> every rank's first batch, {len(values)} runs; "
                f"python -c 'import torch' {torch_s:.2f} s; load {os.getloadavg()[0]:.1f}",
            )
        )
    return out
