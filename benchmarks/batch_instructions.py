"""Instructions per training batch, det-lite's loop against the plain one (issue 27; not a row).

``python benchmarks/batch_instructions.py [det|plain ...]`` runs the search measure's trial
(``_search_model.py``: the digits MLP, batches of 64, Adam, one seed) under valgrind's
callgrind twice per side, for ``SHORT`` and ``LONG`` batches, and prints the instructions per
batch: the difference of the two runs' totals over the extra batches, so imports, set-up and the
end of the run cancel out. Unlike times on a shared 2-vCPU machine (whose speed drifts 15-30 %
from minute to minute), the count is the same from run to run to a few hundred instructions,
so it shows what a change to the loop costs or saves per batch. Needs ``valgrind``; ~3 minutes
a side on 2 cores (the two runs of a side in parallel).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import child_env  # noqa: E402

SHORT, LONG = 100, 600
HP = {"hidden": 150, "lr": 0.003, "dropout": 0.2, "global_batch_size": 64, "seed": 3}
RUN = """
import sys
import torch
torch.set_num_threads(1)
import _search_model as m
from determined_lite import pytorch as dp
side, n, hp = sys.argv[1], int(sys.argv[2]), eval(sys.argv[3])
if side == "plain":
    m.PlainRun(hp, hp["data_path"]).train_to(n)
else:
    conf = {"reproducibility": {"experiment_seed": hp["seed"]}}
    with dp.init(hparams=hp, exp_conf=conf) as ctx:
        never = dp.Batch(10**9)
        dp.Trainer(m.SearchTrial(ctx), ctx).fit(
            max_length=dp.Batch(n), checkpoint_period=never, validation_period=never
        )
"""


def instructions(side: str, tmp: str) -> float:
    """Instructions per batch of ``side`` (``det`` or ``plain``)."""
    hp = dict(HP, data_path=os.path.join(tmp, "digits.npz"))
    env = child_env(DET_LITE_HOME=os.path.join(tmp, "home"))
    procs = {}
    for n in (SHORT, LONG):
        out = os.path.join(tmp, f"callgrind.{side}.{n}")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        argv += [sys.executable, "-c", RUN, side, str(n), repr(hp)]
        procs[n] = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    totals = {}
    for n, proc in procs.items():
        log = proc.communicate()[0]
        found = re.search(r"Collected : (\d+)", log)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(f"{side} {n} batches failed:\n{log[-2000:]}")
        totals[n] = int(found.group(1))
    return (totals[LONG] - totals[SHORT]) / (LONG - SHORT)


def main(sides: list) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        code = f"import _search_model as m; m.write_digits({os.path.join(tmp, 'digits.npz')!r})"
        subprocess.run([sys.executable, "-c", code], check=True, env=child_env())
        counts = {side: instructions(side, tmp) for side in sides}
    for side, count in counts.items():
        print(f"{side:6s} {count / 1e6:.3f} M instructions per batch")
    if {"det", "plain"} <= set(counts):
        print(f"det-lite / plain: {counts['det'] / counts['plain']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["det", "plain"])
