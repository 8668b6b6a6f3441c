"""Where the time of a search of small trials goes, phase by phase (issue 27; not a benchmark row).

``PYTHONPATH=$PWD python benchmarks/search_phases.py [TRIALS] [BATCHES] [asha]`` runs one random search
of the search measure's trial (``_search_model.py``, 2 at a time on 2 cores) through
``det-lite experiment create`` in a fresh ``$DET_LITE_HOME`` and prints, from the files and the
store it leaves, the medians per trial run of:

- ``start``: the runner writing the run's spec -> the end of its first batch;
- ``train``: first batch -> the last validation's row in the store;
- ``tail``: last validation -> ``result.json`` (the final checkpoint, its flush and
  registration, the result);
- ``exit_seen``: ``result.json`` -> the runner recording the trial's end (``trials.ended_at``:
  the worker's exit, the fork server's ``waitpid`` and message, the runner noticing it);
- ``next_spec``: the runner recording a trial's end -> the spec of the run that takes its slot;
- ``gap``: ``result.json`` -> that next spec (the slot's idle time between two runs);

and the fixed costs: the command's start -> the first spec, and the last ``result.json`` -> the
command's exit. With ``asha``: an adaptive ASHA search (the search measure's), whole command only.
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import child_env  # noqa: E402
from _search import _config  # noqa: E402


def main(trials: int = 8, batches: int = 320, kind: str = "random") -> None:
    tmp = tempfile.mkdtemp(prefix="search-phases-")
    context = os.path.join(tmp, "context")
    os.makedirs(context)
    with open(os.path.join(context, "model_def.py"), "w") as f:
        f.write("from _search_model import SearchTrial  # noqa: F401\n")
    data, stamps, home = (os.path.join(tmp, n) for n in ("digits.npz", "stamps", "home"))
    os.makedirs(stamps)
    env = child_env(DET_LITE_HOME=home)
    code = f"import _search_model as m; m.write_digits({data!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    config = _config("adaptive_asha" if kind == "asha" else "random", "quick", 2, data, stamps)
    config["searcher"].update(max_trials=trials, max_length={"batches": batches})
    path = os.path.join(tmp, "search.json")
    with open(path, "w") as f:
        json.dump(config, f)
    load = os.getloadavg()[0]
    start = time.time()
    argv = [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, context]
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    end = time.time()
    if kind == "asha":
        print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}; whole command {end - start:.2f} s")
        return
    report(home, stamps, start, end, load)


def report(home: str, stamps: str, start: float, end: float, load: float) -> None:
    db = sqlite3.connect(glob.glob(os.path.join(home, "*.db"))[0])
    runs: List[Dict[str, float]] = []
    for trial_id, ended in db.execute("SELECT id, ended_at FROM trials ORDER BY id"):
        exp_dir = glob.glob(os.path.join(home, "experiments", "*", f"trial_{trial_id}"))[0]
        with open(os.path.join(stamps, f"trial_{trial_id}.jsonl")) as f:
            stamp = json.loads(f.readline())
        (validated,) = db.execute(
            "SELECT max(created_at) FROM validation_metrics WHERE trial_id = ?", (trial_id,)
        ).fetchone()
        result = os.stat(os.path.join(exp_dir, "result.json")).st_mtime
        runs.append(
            {
                "spec": stamp["spec"],
                "first": stamp["first_batch"],
                "val": validated,
                "result": result,
                "ended": ended,
            }
        )
    specs = sorted(r["spec"] for r in runs)
    ends = sorted(runs, key=lambda r: r["ended"])
    phases: Dict[str, List[float]] = {
        k: [] for k in ("start", "train", "tail", "exit_seen", "next_spec", "gap")
    }
    for r in runs:
        phases["start"].append(r["first"] - r["spec"])
        phases["train"].append(r["val"] - r["first"])
        phases["tail"].append(r["result"] - r["val"])
        phases["exit_seen"].append(r["ended"] - r["result"])
    slots = 2
    for r, nxt in zip(ends, specs[slots:]):  # slots free in the order trials end
        phases["next_spec"].append(nxt - r["ended"])
        phases["gap"].append(nxt - r["result"])
    print(f"load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}")
    print(
        f"whole command {end - start:.2f} s; start -> first spec {specs[0] - start:.2f} s; "
        f"first batch {min(r['first'] for r in runs) - start:.2f} s; "
        f"last result -> exit {end - max(r['result'] for r in runs):.2f} s"
    )
    for name, values in phases.items():
        if values:
            median = statistics.median(values)
            print(f"{name:10s} median {median:.3f} s  min {min(values):.3f}  max {max(values):.3f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]), *sys.argv[3:4])
