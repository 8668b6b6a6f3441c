"""Measure: the ``ray`` executor against the ``local`` one on the same box (issues 23 and 41).

A Ray cluster is started in this process as the tests start theirs (``tests/ray_cluster.py``: a
head and one more node, 1 CPU each, no dashboard); its start-up is timed and reported apart
(``ray_cluster_start``). Then, with ``$RAY_ADDRESS`` pointing at it, one unmeasured create of
each side (a box in use: the local fork server and the Ray nodes' actors and fork servers warm,
as after a user's first experiment), then alternating runs of the same ``det-lite experiment
create`` with ``resources.executor: ray`` and ``local`` (2 slots: ``DET_LITE_SLOTS=2``):

* ``ray_driver_connect``: Ray's own part of any Ray driver, apart: a bare driver process
  (``import ray``, ``ray.init`` to the cluster, ``ray.shutdown``), to connected and to its exit;
* ``ray_start_to_first_batch_1slot``: ``_startup``'s tiny trial, create to the end of its first
  batch (ratio ray / local, goal 1.5; Ray's connection, placement group, node actor and the
  node's fork server are in it), and ``..._beyond_connect``: the same less the bare driver's
  time to connected;
* ``ray_grid16_wall``: a grid of 16 such trials (4 batches each, 2 at a time), the whole
  command's wall time (ratio, goal 1.5), and ``..._beyond_driver``: less the bare driver's whole
  process;
* ``ray_driver_peak_rss_mib``: the peak RSS of the ``det-lite`` process itself (the driver; sampled, its
  workers not counted) in MiB,
  ray vs local (``det_lite_s``/``baseline_s`` hold MiB here, not seconds).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from _cli import det_lite_command
from _common import REPO, Row, absolute_row, alternate, child_env, log, ratio_row
from _startup import CONFIG, TRIAL

RUNS: Dict[str, int] = {"smoke": 1, "quick": 2, "full": 4}
GRID_TRIALS = 16


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    import sys

    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from tests.ray_cluster import TestCluster

    runs = repeats or RUNS[mode]
    start = time.monotonic()
    cluster = TestCluster()
    cluster_s = time.monotonic() - start
    try:
        return _measure(runs, cluster.address, cluster_s)
    finally:
        cluster.shutdown()


def _measure(runs: int, address: str, cluster_s: float) -> List[Row]:
    log(f"ray: {runs} run(s) each of a 1-slot trial and a {GRID_TRIALS}-trial grid, ray vs local")
    _create("ray", address, 1), _create("local", address, 1)  # warm: each side's servers
    bare = [_bare_driver(address) for _ in range(runs)]
    first_ray, first_local = alternate(
        runs, lambda: _create("ray", address, 1), lambda: _create("local", address, 1)
    )
    grid_ray, grid_local = alternate(
        runs, lambda: _create("ray", address, GRID_TRIALS), lambda: _create("local", address, GRID_TRIALS)
    )
    connected = statistics.median(b[0] for b in bare)
    driver = statistics.median(b[1] for b in bare)
    first = ([r[0] for r in first_ray], [r[0] for r in first_local])
    grid = ([r[1] for r in grid_ray], [r[1] for r in grid_local])
    return [
        absolute_row("ray_cluster_start", [cluster_s], None, note="head + 1 node, 1 CPU each, in-process"),
        absolute_row("ray_driver_connect", [b[0] for b in bare], None, note="bare Ray driver: to connected"),
        absolute_row("ray_driver_whole", [b[1] for b in bare], None, note="bare Ray driver: to its exit"),
        ratio_row("ray_start_to_first_batch_1slot", *first, 1.5),
        ratio_row(
            "ray_start_to_first_batch_1slot_beyond_connect", [r - connected for r in first[0]], first[1], 1.5
        ),
        ratio_row("ray_grid16_wall", *grid, 1.5),
        ratio_row("ray_grid16_wall_beyond_driver", [r - driver for r in grid[0]], grid[1], 1.5),
        ratio_row(
            "ray_driver_peak_rss_mib",
            [r[2] for r in first_ray + grid_ray],
            [r[2] for r in first_local + grid_local],
            None,  # type: ignore[arg-type]  -- reported, no goal
            unit="MiB",
        ),
    ]


BARE_DRIVER = (
    "import sys, time, ray\n"
    "ray.init(address=sys.argv[1], logging_level='WARNING', log_to_driver=False, configure_logging=False)\n"
    "print(time.time(), flush=True)\n"
    "ray.shutdown()\n"
)


def _bare_driver(address: str) -> Tuple[float, float]:
    """``(s to connected, s to exit)`` of a Python process that only connects to Ray."""
    import sys

    start = time.time()
    out = subprocess.run(
        [sys.executable, "-c", BARE_DRIVER, address], env=child_env(threads=1), capture_output=True, text=True
    )
    whole = time.time() - start
    if out.returncode != 0:
        raise RuntimeError(f"a bare Ray driver failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return float(out.stdout.split()[-1]) - start, whole


def _create(executor: str, address: str, trials: int) -> Tuple[float, float, float]:
    """``(s to the first batch, s to exit, the driver's peak RSS in MiB)`` of one create."""
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        context = os.path.join(tmp, "context")
        os.makedirs(context)
        with open(os.path.join(context, "model_def.py"), "w") as f:
            f.write(TRIAL)
        stamp = os.path.join(tmp, "first_batch.txt")
        config = os.path.join(tmp, "experiment.yaml")
        text = CONFIG.format(stamp=stamp).replace("resources:\n", f"resources:\n  executor: {executor}\n")
        if trials > 1:
            text = text.replace("  name: single", "  name: grid\n  max_concurrent_trials: 2")
            text = text.replace(
                "hyperparameters:\n",
                f"hyperparameters:\n  idx: {{type: categorical, vals: {list(range(trials))}}}\n",
            )
        with open(config, "w") as f:
            f.write(text)
        # $RAY_ADDRESS for the Ray side only: a local trial's fork server image is its whole
        # environment, and each run of this measure starts a cluster at a new address.
        where = {"RAY_ADDRESS": address} if executor == "ray" else {}
        env = child_env(threads=1, DET_LITE_HOME=os.path.join(tmp, "home"), DET_LITE_SLOTS="2", **where)
        start = time.time()
        proc = subprocess.Popen(
            det_lite_command() + ["experiment", "create", config, context],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        peak, out = _peak_rss(proc)
        whole = time.time() - start
        if proc.returncode != 0 or not os.path.exists(stamp):
            raise RuntimeError(
                f"det-lite experiment create ({executor}) failed ({proc.returncode}):\n{out[-3000:]}"
            )
        with open(stamp) as f:
            first = float(f.read()) - start
        return first, whole, peak / 2**20


def _peak_rss(proc: subprocess.Popen) -> Tuple[float, str]:
    """The driver's own peak RSS in bytes (sampled every 0.1 s; its workers not counted) until
    it exits, and its output (read by a thread meanwhile)."""
    import threading

    import psutil

    chunks: List[str] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else ""))
    reader.start()
    peak = 0.0
    driver = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            peak = max(peak, float(driver.memory_info().rss))
        except psutil.Error:
            break
        time.sleep(0.1)
    reader.join()
    proc.wait()
    return peak, "".join(chunks)
