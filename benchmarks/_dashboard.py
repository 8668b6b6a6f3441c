"""Measure 10: ``det-lite ui`` opens an experiment of 100 trials and 10^6 metric rows (absolute, < 1 s).

The store is made with the real ``Store`` API (experiment, trials), and the metric rows are
bulk-inserted in one transaction into its ``training_metrics`` / ``validation_metrics`` tables
(the API writes one row per transaction, which would take minutes here; the rows are exactly
what ``add_training_metrics`` writes). ``det-lite ui`` runs as a user runs it, in its own
process, started afresh for each run (its curve cache empty), and requests go over HTTP one
after the other. Three rows, wall time (median over runs after one untimed run) and the
server's CPU time (``/proc``; under another load the wall time grows, the CPU time much less):

* ``open_cold``: what the experiment page requests when it opens (the experiment, the
  validation curves of every trial, the log tail), on a fresh server;
* ``training_cold``: then the training curves, every one of the 10^6 rows read (the worst case:
  the first look at the training loss);
* ``open_warm``: all of it again, as a live page refreshes (only new rows are read).
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Callable, Dict, List, Optional, Tuple

from _common import REPO, Row, absolute_row, log

GOAL_S = 1.0
# mode -> (trials, training rows per trial, validation rows per trial, runs)
SIZES: Dict[str, Tuple[int, int, int, int]] = {
    "smoke": (10, 1000, 10, 2),
    "quick": (100, 10000, 100, 5),
    "full": (100, 10000, 100, 15),
}
CONFIG = {
    "name": "dashboard-bench",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}},
    "searcher": {"name": "random", "metric": "val_loss", "max_trials": 100, "max_length": {"batches": 10000}},
}


def build_store(home: str, trials: int, rows: int, validations: int) -> int:
    """One experiment of ``trials`` trials with ``rows`` training and ``validations`` validation
    reports each; returns its id."""
    from determined_lite.store import Store

    store = Store(os.path.join(home, "det-lite.db"))
    exp = store.create_experiment(CONFIG, REPO, None, state="COMPLETED")
    ids = []
    for i in range(trials):
        trial = store.create_trial(exp, i, {"lr": 10 ** (-4 + 3 * i / trials)}, seed=i, state="COMPLETED")
        store.update_trial(trial, total_batches=rows, best_validation=1.0 / (i + 1))
        store.add_logs(trial, [f"trial {trial} line {n}" for n in range(20)])
        ids.append(trial)
    store.close()
    now = time.time()
    conn = sqlite3.connect(os.path.join(home, "det-lite.db"))
    with conn:
        for table, count in (("training_metrics", rows), ("validation_metrics", validations)):
            step = rows // count
            conn.executemany(
                f"INSERT INTO {table} (trial_id, total_batches, metrics, created_at) VALUES (?, ?, ?, ?)",
                (
                    (
                        t,
                        b,
                        json.dumps({"loss": math.exp(-b / rows) + 0.01 * math.sin(b + t), "acc": b / rows}),
                        now,
                    )
                    for t in ids
                    for b in range(step, rows + 1, step)
                ),
            )
    conn.close()
    return exp


def _start(env: Dict[str, str]) -> Tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready:
        proc.kill()
        raise RuntimeError("det-lite ui printed no URL in 60 s")
    return proc, proc.stdout.readline().split()[3]


def _get(base: str, token: str, path: str) -> dict:
    request = urllib.request.Request(base + path, headers={"X-Det-Lite-Token": token})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(proc: subprocess.Popen, fetch: Callable[[], int]) -> Tuple[float, float, int]:
    """(wall s, server CPU s, curve points) of ``fetch``."""
    cpu, start = _cpu_s(proc.pid), time.perf_counter()
    points = fetch()
    return time.perf_counter() - start, _cpu_s(proc.pid) - cpu, points


def one_server(home: str, exp: int) -> Dict[str, Tuple[float, float, int]]:
    """A fresh ``det-lite ui``: the page's first open (experiment, validation curves, log tail),
    then the training curves over every row (cold: first read), then both again (warm)."""
    proc, url = _start(dict(os.environ, DET_LITE_HOME=home))
    base, token = url.split("/?token=")

    def curves(kind: str) -> int:
        found = _get(base, token, f"/api/experiments/{exp}/curves?kind={kind}&metric=loss")
        return sum(len(s["x"]) for s in found["series"])

    def page() -> int:
        _get(base, token, f"/api/experiments/{exp}")
        _get(base, token, f"/api/experiments/{exp}/logs?tail=200")
        return curves("validation")

    try:
        return {
            "open_cold": _timed(proc, page),
            "training_cold": _timed(proc, lambda: curves("training")),
            "open_warm": _timed(proc, lambda: page() + curves("training")),
        }
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    trials, rows, validations, runs = SIZES[mode]
    runs = repeats or runs
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as home:
        start = time.perf_counter()
        exp = build_store(home, trials, rows, validations)
        stored = trials * (rows + validations)
        log(f"dashboard: {stored} metric rows stored in {time.perf_counter() - start:.1f} s")
        one_server(home, exp)  # untimed: warms the page cache
        results = [one_server(home, exp) for _ in range(runs)]
    size = f"{trials}_trials_{trials * rows}_rows"
    what = {
        "open_cold": "experiment + validation curves + log tail, fresh server",
        "training_cold": f"training curves over {trials * rows} rows, first read",
        "open_warm": "all of the above again (a live page's refresh)",
    }
    out = []
    for key, note in what.items():
        walls = [r[key][0] for r in results]
        cpus = [r[key][1] for r in results]
        points = results[-1][key][2]
        extra = {"server_cpu_s": statistics.median(cpus), "points": points}
        out.append(
            absolute_row(
                f"ui_{key}_{size}",
                walls,
                GOAL_S,
                note=f"{note}; server CPU {statistics.median(cpus):.2f} s",
                **extra,
            )
        )
    return out
