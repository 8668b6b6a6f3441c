"""Measure 8: peak resident memory of a det-lite training run vs the plain loop (ratio, ABBA).

Each side trains the MLP of measure 1 for the same number of batches in a fresh process and
reports its peak RSS (``VmHWM`` in ``/proc/self/status``): det-lite through ``init()`` +
``Trainer.fit`` with TensorBoard output, a validation and a checkpoint at the end (what a
worker does), the baseline with ``_plain.PlainLoop`` in a process that never imports
det-lite. Both use 1 torch thread. Runs alternate ABBA; the ratio is the median of the paired
ratios. Goal (issue 17): within 5 % of the plain loop.

Linux only (``/proc``); elsewhere the measure fails with that reason.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional, Tuple

if __name__ == "__main__":  # a child process: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

from _common import Row, alternate, child_env, log, ratio_row, run_child  # noqa: E402

GOAL = 1.05
# mode -> (batches per run, runs per side)
SIZES: Dict[str, Tuple[int, int]] = {"smoke": (20, 1), "quick": (400, 3), "full": (1000, 5)}


def peak_rss() -> int:
    """This process's peak resident set size in bytes (``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run(mode: str, repeats: Optional[int] = None) -> List[Row]:
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("the memory measure reads /proc/self/status (Linux only)")
    batches, runs = SIZES[mode]
    runs = repeats or runs
    log(f"memory: {runs} run(s) each of det-lite and the plain loop, MLP, {batches} batches, peak RSS")
    ours, base = alternate(runs, lambda: _child("det-lite", batches), lambda: _child("plain", batches))
    # ratio_row's "seconds" keys would hold bytes here: the row names its own keys instead.
    row = ratio_row("memory_mlp_peak_rss", ours, base, GOAL, batches=batches)
    row["det_lite_bytes"], row["baseline_bytes"] = row.pop("det_lite_s"), row.pop("baseline_s")
    row["det_lite_s"] = row["baseline_s"] = None
    return [row]


def _child(side: str, batches: int) -> float:
    proc = run_child(
        [sys.executable, os.path.abspath(__file__), side, str(batches)],
        f"memory ({side})",
        timeout=600,
        env=child_env(threads=1),
    )
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss"])


def _train(side: str, batches: int) -> None:
    import torch

    torch.set_num_threads(1)
    if side == "plain":
        from _plain import PlainLoop

        loop = PlainLoop("mlp")
        for _ in range(batches):
            loop.step()
    else:
        from _trials import det_lite_times

        det_lite_times("mlp", batches)


if __name__ == "__main__":
    _train(sys.argv[1], int(sys.argv[2]))
    print(json.dumps({"peak_rss": peak_rss()}))
