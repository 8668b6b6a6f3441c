"""Two commits' searches, paired and alternated (issue 27; not a benchmark row).

``python benchmarks/search_ab.py REV_A REV_B [random|adaptive_asha] [PAIRS]`` checks both
revisions out as worktrees of this repository (in a temporary folder, removed at the end) and
runs the search measure's search (``_search.py``'s config: 32 trials of the digits MLP, 2 at a
time) through each one's ``det-lite experiment create``, a fresh ``$DET_LITE_HOME`` per search,
alternating which goes first in each pair. Each side keeps one fork server warm for all its
searches (an untimed search first). Prints each pair and the medians.

On a box whose speed drifts by more than the difference sought (this project's 2-vCPU VM: the
same search 25-34 s within hours), a pair taken a minute apart is the comparison to trust, not
two ``run.py`` rows.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Run in the side's own checkout: its benchmarks, its det-lite (first on PYTHONPATH).
SEARCH = """
import json, os, subprocess, sys, tempfile, time
from _search import _config
from _common import child_env
tmp = tempfile.mkdtemp(prefix="ab-", dir=sys.argv[3])
context = os.path.join(tmp, "context")
os.makedirs(context)
with open(os.path.join(context, "model_def.py"), "w") as f:
    f.write("from _search_model import SearchTrial\\n")
env = child_env(threads=1, DET_LITE_HOME=os.path.join(tmp, "home"), DET_LITE_FORKSERVER_IDLE_S="300",
                DET_LITE_BENCH_SERVER="ab-" + sys.argv[2])
config = _config(sys.argv[1], "quick", os.cpu_count() or 1, sys.argv[4], tempfile.mkdtemp(dir=tmp))
path = os.path.join(tmp, "search.json")
with open(path, "w") as f:
    json.dump(config, f)
start = time.perf_counter()
subprocess.run([sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, context],
               env=env, stdout=subprocess.DEVNULL, check=True)
print(time.perf_counter() - start)
"""


def _search(checkout: str, side: str, kind: str, tmp: str, data: str) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout, os.path.join(checkout, "benchmarks")]))
    out = subprocess.run(
        [sys.executable, "-c", SEARCH, kind, side, tmp, data],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return float(out.stdout.strip().splitlines()[-1])


def compare(revs: List[str], kind: str, pairs: int) -> Dict[str, List[float]]:
    """Seconds of each revision's searches, ``pairs`` of them, alternated."""
    times: Dict[str, List[float]] = {rev: [] for rev in revs}
    with tempfile.TemporaryDirectory(prefix="search-ab-") as tmp:
        data = os.path.join(tmp, "digits.npz")
        sys.path.insert(0, HERE)
        from _search_model import write_digits

        write_digits(data)
        checkouts = {}
        for i, rev in enumerate(revs):
            checkouts[rev] = os.path.join(tmp, f"side{i}")
            subprocess.run(
                ["git", "-C", REPO, "worktree", "add", "-q", "--detach", checkouts[rev], rev], check=True
            )
        try:
            for i, rev in enumerate(revs):
                _search(checkouts[rev], str(i), kind, tmp, data)  # warms the side's fork server
            for pair in range(pairs):
                order = revs if pair % 2 == 0 else revs[::-1]
                for rev in order:
                    times[rev].append(_search(checkouts[rev], str(revs.index(rev)), kind, tmp, data))
                print(
                    f"pair {pair}: " + ", ".join(f"{rev} {times[rev][-1]:.2f} s" for rev in revs), flush=True
                )
        finally:
            for rev in revs:
                subprocess.run(
                    ["git", "-C", REPO, "worktree", "remove", "--force", checkouts[rev]], check=False
                )
    return times


if __name__ == "__main__":
    a, b = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) > 3 else "adaptive_asha"
    result = compare([a, b], kind, int(sys.argv[4]) if len(sys.argv) > 4 else 4)
    medians = {rev: statistics.median(t) for rev, t in result.items()}
    print(
        f"{kind}: median {a} {medians[a]:.2f} s, {b} {medians[b]:.2f} s ({medians[b] / medians[a] - 1:+.1%})"
    )
