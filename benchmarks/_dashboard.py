"""Measure 10: ``det-lite ui`` opens an experiment of 100 trials and 10^6 metric rows (absolute, < 1 s).

The store is made with the real ``Store`` API (experiment, trials), and the metric rows are
bulk-inserted in one transaction into its ``training_metrics`` / ``validation_metrics`` tables
(the API writes one row per transaction, which would take minutes here; the rows are exactly
what ``store.metrics.add_training`` writes). ``det-lite ui`` runs as a user runs it, in its own
process, started afresh for each run (its curve cache empty), and requests go over HTTP one
after the other. Three rows, wall time (median over runs after one untimed run) and the
server's CPU time (``/proc``; under another load the wall time grows, the CPU time much less):

* ``open_cold``: what the experiment page requests when it opens (the experiment, the
  validation curves of every trial, the log tail), on a fresh server;
* ``training_cold``: then the training curves, every one of the 10^6 rows read (the worst case:
  the first look at the training loss);
* ``open_warm``: all of it again, as a live page refreshes (only new rows are read).

The store keeps each curve down-sampled as it is written (``store/_buckets.py``); after the bulk
insert the benchmark fills those buckets with the v4 migration's backfill, which the store tests
check equals what the write path keeps. A fourth row, ``store_write_report``, is the cost of that
write path: ``store.metrics.add_training`` (3 metrics, a report every 100 batches) per report, against
the same transaction without the buckets (what the store wrote before schema v4) on the same
file; wall and CPU time, runs alternating.
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
WRITE_REPORTS = {"smoke": 200, "quick": 2000, "full": 5000}
CONFIG = {
    "name": "dashboard-bench",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}},
    "searcher": {"name": "random", "metric": "val_loss", "max_trials": 100, "max_length": {"batches": 10000}},
}


def build_store(home: str, trials: int, rows: int, validations: int) -> int:
    """One experiment of ``trials`` trials with ``rows`` training and ``validations`` validation
    reports each; returns its id."""
    from determined_lite.store import Store, _buckets

    store = Store(os.path.join(home, "det-lite.db"))
    exp = store.experiments.create(CONFIG, REPO, None, state="COMPLETED")
    ids = []
    for i in range(trials):
        trial = store.trials.create(exp, i, {"lr": 10 ** (-4 + 3 * i / trials)}, seed=i, state="COMPLETED")
        store.trials.update(trial, total_batches=rows, best_validation=1.0 / (i + 1))
        store.logs.add(trial, [f"trial {trial} line {n}" for n in range(20)])
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
        _buckets.rebuild_series(conn)
    conn.close()
    return exp


def _write_costs(home: str, reports: int) -> Tuple[float, float, float, float]:
    """(det-lite wall, baseline wall, det-lite CPU, baseline CPU) seconds per report: ``reports``
    reports through ``store.metrics.add_training``, then the same through the pre-v4 transaction."""
    from determined_lite.store import Store
    from determined_lite.store._db import dumps_json

    store = Store(os.path.join(home, "det-lite.db"))
    exp = store.experiments.create(CONFIG, REPO, None, state="COMPLETED")
    ours, theirs = store.trials.create(exp, 0, {}, seed=0), store.trials.create(exp, 1, {}, seed=1)
    conn = store.db.connection()

    def plain(trial: int, batches: int, metrics: Dict[str, float]) -> None:
        text = dumps_json(metrics, "training metrics")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE trials SET total_batches = MAX(total_batches, ?) WHERE id = ?", (batches, trial))
        conn.execute(
            "INSERT INTO training_metrics (trial_id, total_batches, metrics, created_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (trial_id, total_batches) DO UPDATE SET metrics = excluded.metrics,"
            " created_at = excluded.created_at",
            (trial, batches, text, time.time()),
        )
        conn.execute("COMMIT")

    out = []
    for trial, write in ((ours, store.metrics.add_training), (theirs, plain)):
        wall, cpu = time.perf_counter(), time.process_time()
        for n in range(1, reports + 1):
            write(trial, 100 * n, {"loss": 1.0 / n, "accuracy": n / reports, "lr": 0.1})
        out.append(((time.perf_counter() - wall) / reports, (time.process_time() - cpu) / reports))
    store.close()
    return out[0][0], out[1][0], out[0][1], out[1][1]


def write_row(runs: int, reports: int) -> Row:
    """``store_write_report``: the metric write path's cost per report, with and without buckets."""
    found = []
    for _ in range(runs + 1):  # the first run is untimed
        with tempfile.TemporaryDirectory(prefix="bench-ui-write-") as home:
            found.append(_write_costs(home, reports))
    found = found[1:]
    ours, base = [f[0] for f in found], [f[1] for f in found]
    cpu, base_cpu = statistics.median(f[2] for f in found), statistics.median(f[3] for f in found)
    return absolute_row(
        "store_write_report",
        ours,
        None,
        baseline_s=statistics.median(base),
        ratio=statistics.median(o / b for o, b in zip(ours, base)),
        cpu_s=cpu,
        baseline_cpu_s=base_cpu,
        note=f"add_training_metrics vs the pre-v4 write, {reports} reports; CPU {cpu * 1e6:.0f} vs"
        f" {base_cpu * 1e6:.0f} us",
    )


def _start(env: Dict[str, str]) -> Tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui", "--port", "0"],
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
    out.append(write_row(runs, WRITE_REPORTS[mode]))
    return out
