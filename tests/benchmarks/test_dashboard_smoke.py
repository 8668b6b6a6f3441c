"""``benchmarks/run.py --only dashboard`` works: a tiny run (10 trials of 1,000 rows) prints the
three dashboard rows and the store's write-path row with positive times. Never asserts timings."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "benchmarks", "run.py")


def test_dashboard_rows_exist():
    proc = subprocess.run(
        [sys.executable, RUN, "--smoke", "--json", "--only", "dashboard"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    names = [f"ui_{k}_10_trials_10000_rows" for k in ("open_cold", "training_cold", "open_warm")]
    assert [r["name"] for r in rows] == [*names, "store_write_report"]
    for row in rows[:3]:
        assert row["goal"] == 1.0 and row["baseline_s"] is None, row
        assert row["det_lite_s"] > 0 and row["server_cpu_s"] >= 0 and row["points"] > 0, row
    write = rows[3]  # per report, against the same transaction without the curve buckets
    assert write["det_lite_s"] > 0 and write["baseline_s"] > 0 and write["cpu_s"] > 0, write
