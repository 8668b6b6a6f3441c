"""Measure 6: ``det-lite experiment list`` on a store with 1,000 experiments (absolute, < 0.3 s).

The store is built with the real ``Store`` API in a temporary ``$DET_LITE_HOME``: 1,000
experiments (the flagship experiment's config, one trial each, most of them COMPLETED).
The command runs as a user runs it, the ``det-lite`` console script in a fresh process, and the
wall time from start to exit is measured; median over runs after one untimed run (which
compiles nothing new but warms the page cache). Two rows: the default listing (the newest 100)
and ``--all``. A run under ``python -X importtime`` checks that torch is not imported and
names the slowest imports (``slowest_imports``, cumulative microseconds).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from _common import REPO, Row, absolute_row, child_env, log, run_child

GOAL_S = 0.3
# mode -> (experiments, runs per command)
SIZES: Dict[str, Tuple[int, int]] = {"smoke": (50, 2), "quick": (1000, 7), "full": (1000, 21)}
CONFIG = {
    "name": "digits-mlp",
    "entrypoint": "examples.digits.model_def:DigitsTrial",
    "hyperparameters": {"global_batch_size": 64, "lr": 0.01, "hidden_size": 256, "dropout": 0.2},
    "searcher": {
        "name": "single",
        "metric": "accuracy",
        "smaller_is_better": False,
        "max_length": {"epochs": 15},
    },
    "min_validation_period": {"epochs": 1},
    "reproducibility": {"experiment_seed": 42},
    "resources": {"slots_per_trial": 1},
}


def build_store(home: str, experiments: int) -> None:
    """``experiments`` experiments with one trial each in ``<home>/det-lite.db``."""
    from determined_lite.store import Store

    store = Store(os.path.join(home, "det-lite.db"))
    try:
        states = ("COMPLETED", "COMPLETED", "COMPLETED", "CANCELED", "ERROR", "PAUSED")
        for i in range(experiments):
            config = dict(CONFIG, name=f"digits-{i}")
            config_path = os.path.join(REPO, "experiment.yaml")
            exp_id = store.experiments.create(config, REPO, config_path, state=states[i % 6])
            store.trials.create(exp_id, 0, CONFIG["hyperparameters"], seed=i, state=states[i % 6])
    finally:
        store.close()


def det_lite_command() -> List[str]:
    """The ``det-lite`` console script of this interpreter's installation (beside
    ``sys.executable``, as a virtual environment's ``bin`` has it), or ``python -m
    determined_lite.cli`` without one. Not the first ``det-lite`` on ``PATH``: that may be another
    installation's, or a version manager's shim (pyenv's runs a shell and ``pyenv exec`` first,
    ~0.12 s a command here) that the peers, run as ``sys.executable``, do not pay."""
    exe = os.path.join(os.path.dirname(sys.executable), "det-lite")
    if os.access(exe, os.X_OK):
        return [exe]
    return [sys.executable, "-m", "determined_lite.cli"]


def time_command(argv: List[str], env: Dict[str, str], runs: int) -> List[float]:
    """Wall time of ``runs`` runs of ``argv`` after one untimed run."""
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        if i:
            times.append(elapsed)
    return times


def import_profile(args: List[str], env: Dict[str, str]) -> Tuple[bool, List[str]]:
    """``(torch imported?, the 5 slowest imports near the top of the tree)`` of ``det-lite ARGS``."""
    argv = [sys.executable, "-X", "importtime", "-m", "determined_lite.cli", *args]
    proc = run_child(argv, "det-lite under -X importtime", timeout=60, env=env)
    modules: List[Tuple[int, str]] = []
    torch_imported = False
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|(\s*)(\S+)", line)
        if not m:
            continue
        cumulative, indent, name = int(m.group(1)), len(m.group(2)), m.group(3)
        if name == "torch" or name.startswith("torch."):
            torch_imported = True
        if indent <= 3 and name not in ("determined_lite", "determined_lite.cli"):  # near the top
            modules.append((cumulative, name))
    slowest = [f"{name} {us / 1000:.0f} ms" for us, name in sorted(modules, reverse=True)[:5]]
    return torch_imported, slowest


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    experiments, runs = SIZES[mode]
    runs = repeats or runs
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as home:
        start = time.perf_counter()
        build_store(home, experiments)
        log(f"cli: {experiments} experiments stored in {time.perf_counter() - start:.1f} s; {runs} runs each")
        env = child_env(DET_LITE_HOME=home)
        rows = []
        for args, suffix in ((["experiment", "list"], ""), (["experiment", "list", "--all"], "_all")):
            times = time_command(det_lite_command() + args, env, runs)
            torch_imported, slowest = import_profile(args, env)
            rows.append(
                absolute_row(
                    f"cli_experiment_list{suffix}_{experiments}",
                    times,
                    GOAL_S,
                    torch_imported=torch_imported,
                    slowest_imports=slowest,
                    note="torch imported!" if torch_imported else "no torch import",
                )
            )
    return rows
