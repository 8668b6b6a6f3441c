"""det-lite benchmarks: each det-lite path against a hand-written baseline doing the same work.

    python benchmarks/run.py [--quick] [--json] [--only single,ddp,...] [--repeats N]

Measures (one module each): ``single`` (CPU step time, MLP and CNN, vs a plain PyTorch loop),
``horovod`` and ``ddp`` (2-worker step time vs hand-written Horovod / DDP loops), ``validation``
(2-worker validation with several metrics and custom reducers vs one fused all-gather, and the
number of collectives per reduction), ``checkpoint`` (save/load of a large model vs raw
``torch.save``/``torch.load``), ``cli`` (``det-lite experiment list`` on 1,000 experiments),
``startup`` (``det-lite experiment create`` to the first trained batch), ``memory`` (peak RSS of
a training run vs the plain loop), ``compile`` (``optimizations.compile`` vs a hand-compiled
and an eager plain loop) and ``checkpoint_code`` (a checkpoint and its removal with a 10,000-file
context vs a 1-file one). See README.md.

The table goes to stdout (``--json``: a list of ``{"name", "det_lite_s", "baseline_s",
"ratio", "goal", ...}``); progress goes to stderr. Exit code 1 when a measure failed to run
(a missed goal is a result, not a failure).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(1, REPO)

from _common import DET_LITE, Row, compare_peers, format_peer_table, format_table, is_peer, log, passed  # noqa: E402
from _peers import FRAMEWORKS, INSTALL_HINT, missing  # noqa: E402

# name -> (module, keyword arguments of its run()); run in this order.
MEASURES = {
    "single": ("_single", {}),
    "horovod": ("_two_workers", {"engine": "horovod"}),
    "ddp": ("_two_workers", {"engine": "ddp"}),
    "validation": ("_validation", {}),
    "checkpoint": ("_checkpoint", {}),
    "cli": ("_cli", {}),
    "startup": ("_startup", {}),
    "memory": ("_memory", {}),
    "compile": ("_compile", {}),
    "dashboard": ("_dashboard", {}),
    "checkpoint_code": ("_checkpoint_code", {}),
    "ray": ("_ray", {}),
    "search": ("_search", {}),
}
# The measures ``--peers`` also runs with Lightning's Trainer, Fabric and Accelerate.
PEER_MEASURES = ("single", "ddp", "validation", "search")


def machine() -> str:
    """One line describing this machine: cores, CPU model, Python and torch versions."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from importlib.metadata import version

        torch_version = version("torch")
    except Exception:  # noqa: BLE001 -- informational only
        torch_version = "?"
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}, torch {torch_version}"


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller models and fewer repeats (< 5 min)")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, to check that the benchmarks run (not timings)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--only", default="", help=f"comma-separated measures to run (default all): {', '.join(MEASURES)}"
    )
    parser.add_argument("--repeats", type=int, default=None, help="repeats per measure (default per mode)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per side for the single-process measure (1)"
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help=f"also run {', '.join(PEER_MEASURES)} with {', '.join(FRAMEWORKS)} (needs: {INSTALL_HINT})",
    )
    args = parser.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = [m for m in only if m not in MEASURES]
    if unknown:
        parser.error(f"unknown measure(s) {', '.join(unknown)}; choose from {', '.join(MEASURES)}")
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    args.measures = only or list(MEASURES)
    if args.peers and missing(args.measures):
        needed = ", ".join(missing(args.measures))
        parser.error(f"--peers needs {needed}; install the bench extra: {INSTALL_HINT}")
    args.mode = "smoke" if args.smoke else ("quick" if args.quick else "full")
    return args


def run_measure(name: str, mode: str, repeats: Optional[int], threads: int, peers: bool) -> List[Row]:
    module_name, kwargs = MEASURES[name]
    module = importlib.import_module(module_name)
    if name in ("single", "compile"):
        kwargs = {**kwargs, "threads": threads}
    if peers and name in PEER_MEASURES:
        kwargs = {**kwargs, "peers": FRAMEWORKS}
    return module.run(mode, repeats, **kwargs)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    rows: List[Row] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="det-lite-bench-home-") as home:
        # Nothing a benchmark writes (store, checkpoints, TensorBoard files) lands in ~/.det-lite.
        os.environ["DET_LITE_HOME"] = home
        for name in args.measures:
            t0 = time.perf_counter()
            log(f"== {name} ({args.mode})")
            try:
                rows.extend(run_measure(name, args.mode, args.repeats, args.threads, args.peers))
            except Exception as e:  # noqa: BLE001 -- report it and run the other measures
                failed = True
                traceback.print_exc()
                rows.append(
                    {
                        "name": name,
                        "det_lite_s": None,
                        "baseline_s": None,
                        "ratio": None,
                        "goal": None,
                        "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                    }
                )
            log(f"   {name} took {time.perf_counter() - t0:.1f} s")
    elapsed = time.perf_counter() - started
    compare_peers(rows)
    for row in rows:
        row.setdefault("framework", DET_LITE)
        if "error" not in row:
            row["passed"] = passed(row)
    log(f"total {elapsed:.1f} s on {machine()}")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"det-lite benchmarks ({args.mode}), {elapsed:.0f} s on {machine()}\n")
        print(format_table([r for r in rows if "error" not in r and not is_peer(r)]))
        if any(is_peer(r) for r in rows):
            print("\nPeers (each framework in lockstep with the same hand-written baseline):\n")
            print(format_peer_table([r for r in rows if "error" not in r]))
        for r in rows:
            if "error" in r:
                print(f"\n{r['name']}: FAILED TO RUN: {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
