"""Running the ``det-lite`` CLI from tests, and writing experiment configs from a fixture's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Optional

import yaml

from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(
    *args: str,
    check: bool = False,
    timeout: float = 240,
    env: Optional[Dict[str, str]] = None,
    cwd: str = REPO,
) -> subprocess.CompletedProcess:
    """``det-lite ARGS`` in a subprocess from ``cwd`` (DET_LITE_HOME comes from the environment);
    ``timeout`` is for a quiet machine and stretches with the load (``tests/timing.py``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", *args],
        capture_output=True,
        text=True,
        timeout=budget(timeout),
        cwd=cwd,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"det-lite {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def describe(exp_id: int, home: Optional[str] = None) -> dict:
    """Experiment ``exp_id`` with its trials and every metric, checkpoint and run, as the store
    records them (``store.experiments.describe``) under ``home`` (default ``$DET_LITE_HOME``), in
    JSON's form (non-finite numbers as null, as the CLI prints them). ``experiment describe
    --json`` prints Determined's form, the experiment alone."""
    from determined_lite.cli._common import json_safe
    from determined_lite.store import Store

    with Store(os.path.join(home, "det-lite.db") if home else None) as store:
        found = store.experiments.describe(exp_id)
    if found is None:
        raise AssertionError(f"experiment {exp_id} not found")
    return json.loads(json.dumps(json_safe(found)))


def write_config(source: str, tmp_path: object, name: str = "exp.yaml", **changes: object) -> str:
    """A copy of the YAML config ``source`` under ``tmp_path`` with dotted-key ``changes``."""
    with open(source) as f:
        config = yaml.safe_load(f)
    for key, value in changes.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def trials_so_far(exp_id: int) -> list:
    """The trials of experiment ``exp_id`` as ``describe`` gives them, or [] while the experiment
    is not in the store yet (its process may have made the store file but not the row)."""
    from determined_lite.store._paths import default_db_path

    if not os.path.exists(default_db_path()):
        return []
    try:
        return describe(exp_id)["trials"]
    except AssertionError:
        return []


def wait_for_batches(exp_id: int, at_least: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Wait until the first trial of experiment ``exp_id`` reported ``at_least`` batches while
    ``proc`` (the experiment's foreground process) still runs."""
    deadline = time.monotonic() + budget(timeout)
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        trials = trials_so_far(exp_id)
        if trials and trials[0]["total_batches"] >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"experiment {exp_id} did not reach {at_least} batches")


def pause_foreground(exp_id: int, proc: subprocess.Popen) -> str:
    """``det-lite experiment pause ID`` from another terminal; the experiment's foreground
    process ``proc`` then exits 1 (paused). Its output."""
    cli("experiment", "pause", str(exp_id), check=True)
    out, _ = proc.communicate(timeout=budget(60))
    assert proc.returncode == 1, out
    return out


def activate(exp_id: int) -> subprocess.CompletedProcess:
    """``det-lite experiment activate ID`` in the foreground, which must succeed."""
    proc = cli("experiment", "activate", str(exp_id))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def asha_overrides(**extra: Any) -> Dict[str, Any]:
    """``write_config`` overrides for the linear fixture's ASHA tests: an aggressive ASHA of
    4 trials (8 batches, 3 rungs, 2 at a time) over 4 learning rates, validating every 2 batches."""
    return {
        "searcher": {
            "name": "adaptive_asha",
            "metric": "val_loss",
            "max_length": {"batches": 8},
            "max_trials": 4,
            "divisor": 2,
            "max_rungs": 3,
            "mode": "aggressive",
            "max_concurrent_trials": 2,
        },
        "hyperparameters.lr": {"type": "categorical", "vals": [0.001, 0.003, 0.01, 0.03]},
        "min_validation_period": {"batches": 2},
        **extra,
    }
