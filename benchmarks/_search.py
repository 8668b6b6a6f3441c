"""Measure 11 (issue 27): a search of many small trials, det-lite against the machine's limit and peers.

A random search and an adaptive ASHA search of ``TRIALS`` trials of the digits MLP
(``_search_model``: ~1 s of training each), ``max_concurrent_trials`` = cores, through
``det-lite experiment create`` (the console script, in the foreground, a fresh
``$DET_LITE_HOME``): its wall time against

- the **limit** (``baseline_s``): the runs det-lite made (each trial's hyperparameters, trained
  to each batch it validated at) back to back in one warm process, divided by the cores;
- with ``--peers``, **Ray Tune** (``ray_tune``) and **Optuna** (``optuna``, in-process) over the
  same hyperparameters (``_search_peers.py``), each as a whole process like det-lite's command;
- det-lite with ``DET_LITE_FORKSERVER=0`` (``no_forkserver_s``): every worker a fresh interpreter.

Goal: <= 1.25x the limit, and below Ray Tune and Optuna. From the same runs, the trials' start-up
(``search_trial_startup``: the runner writing a run's spec, just before it starts it, to the end
of its first batch) and the ASHA promotions' (``search_asha_promotion``: the same for runs that
resume from a checkpoint; ``search_asha_promotion_in_process``: promotions decided when the
trial reports, which train on in its process, from the end of the rung's validation to the end
of the next batch) against ``python -c "import torch"`` measured beside them: goal 0.3 s
above it. Then the store and the CLI at scale: ``det-lite experiment list`` and ``describe`` with
1,000 experiments, one of them of 100 trials and 10^6 training rows (goal 0.5 s), and the metric
write path per report (``store_write_report``, as in the dashboard measure).
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import _search_slots
import yaml
from _cli import det_lite_command
from _common import HERE, Row, absolute_row, child_env, log, peer_row, ratio_row, run_child

TRIALS = {"smoke": 4, "quick": 32, "full": 32}
BATCHES = {"smoke": 16, "quick": 1280, "full": 1280}  # ~1 s of training a trial (issue 27)
IDLE_S = "120"  # the fork server the searches share ends 2 minutes after the last one
RUNG_DIVISOR = 2
STARTUP_ABOVE_TORCH_S = 0.3
GOAL = 1.25
# det-lite searches per measure, each timed with its limit right after it: one pair on this
# 2-vCPU VM moved by 0.3 between two runs of the same code (benchmarks/README.md, round 7)
PAIRS = {"smoke": 1, "quick": 1, "full": 3}
PEERS = ("ray_tune", "optuna")
SPANS = {
    "fresh": "runner's start -> first batch",
    "resumed": "runner's start -> first batch",
    "in_process": "rung's validation -> next batch",
}

MODEL_DEF = "from _search_model import SearchTrial  # noqa: F401\n"


def _config(kind: str, mode: str, cores: int, data: str, stamps: str) -> Dict[str, Any]:
    searcher: Dict[str, Any] = {
        "name": kind,
        "metric": "validation_loss",
        "max_length": {"batches": BATCHES[mode]},
        "max_trials": TRIALS[mode],
        "max_concurrent_trials": cores,
    }
    if kind == "adaptive_asha":
        searcher.update(mode="aggressive", divisor=RUNG_DIVISOR, max_rungs=3)
    return {
        "name": f"search-bench-{kind}",
        "entrypoint": "model_def:SearchTrial",
        "hyperparameters": {
            "global_batch_size": 64,
            "hidden": {"type": "int", "minval": 32, "maxval": 256},
            "lr": {"type": "log", "base": 10, "minval": -3.5, "maxval": -1.5},
            "dropout": {"type": "double", "minval": 0.0, "maxval": 0.4},
            "data_path": data,
            "stamp_dir": stamps,
        },
        "searcher": searcher,
        "max_restarts": 0,
        "reproducibility": {"experiment_seed": 7},
    }


def _det_lite(
    tmp: str, config: Dict[str, Any], forkserver: bool, server: str = "warm"
) -> Tuple[float, Dict[str, Any]]:
    """Run the search; (wall seconds, the experiment as the store records it, every metric).
    ``server``: the fork server's key, through a variable of the workers' environment: "warm"
    (the server :func:`_warm_server` left running) or a new one (the search starts its own)."""
    home = tempfile.mkdtemp(prefix="home-", dir=tmp)
    context = os.path.join(tmp, "context")
    path = os.path.join(home, "search.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    env = child_env(
        threads=1,
        DET_LITE_HOME=home,
        DET_LITE_FORKSERVER="1" if forkserver else "0",
        DET_LITE_FORKSERVER_IDLE_S=IDLE_S if server == "warm" else "0",
        DET_LITE_BENCH_SERVER=server,
    )
    start = time.perf_counter()
    run_child(det_lite_command() + ["experiment", "create", path, context], "det-lite search", 1800, env=env)
    seconds = time.perf_counter() - start
    from determined_lite.store import Store

    with Store(os.path.join(home, "det-lite.db")) as store:
        described = store.experiments.describe(1)
    assert described is not None, "the search recorded no experiment"
    return seconds, described


def _warm_server(tmp: str, config: Dict[str, Any]) -> None:
    """One untimed 1-batch trial of ``config``'s experiment: a user's earlier command, which
    leaves the fork server the timed search then finds warm (launch/_forkserver.py)."""
    hps = dict(config["hyperparameters"], hidden=32, lr=0.01, dropout=0.0, stamp_dir=None)
    single = {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}}
    _det_lite(tmp, dict(config, hyperparameters=hps, searcher=single), forkserver=True)


def _runs(described: Dict[str, Any]) -> List[Tuple[Dict[str, Any], List[int]]]:
    """Each trial's hyperparameters (and seed) and the batches it validated at."""
    out = []
    for trial in described["trials"]:
        points = sorted({int(v["total_batches"]) for v in trial["validation_metrics"]})
        hp = {k: trial["hparams"][k] for k in ("hidden", "lr", "dropout")}
        hp["seed"] = trial["seed"]  # the same initial weights as det-lite's trial
        out.append((hp, points or [int(trial["total_batches"])]))
    return out


def _side(side: str, job: Dict[str, Any], tmp: str) -> float:
    path = os.path.join(tmp, f"job-{side}.json")
    with open(path, "w") as f:
        json.dump(job, f)
    start = time.perf_counter()
    out = run_child(
        [sys.executable, os.path.join(HERE, "_search_peers.py"), side, path],
        side,
        1800,
        env=child_env(threads=1),
    )
    whole = time.perf_counter() - start
    reported = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    return reported if side == "limit" else whole


def _parallel_limit(job: Dict[str, Any], tmp: str) -> float:
    """The limit's runs dealt evenly (:func:`_deal`) over ``cores`` processes training at once:
    seconds until the last one's training ended (each process's own, imports excluded). Against
    the limit, what the cores give when all are busy (2 vCPUs sharing a core give less than 2x)."""
    procs = []
    for k, runs in enumerate(_deal(job["runs"], job["cores"])):
        path = os.path.join(tmp, f"job-limit-{k}.json")
        with open(path, "w") as f:
            json.dump(dict(job, runs=runs), f)
        argv = [sys.executable, os.path.join(HERE, "_search_peers.py"), "limit", path]
        procs.append(subprocess.Popen(argv, env=child_env(threads=1), stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    return max(json.loads(out.strip().splitlines()[-1])["seconds"] for out in outs)


def _deal(runs: List[Any], cores: int) -> List[List[Any]]:
    """``runs`` over ``cores`` processes, longest first to the least loaded (by batches): the
    most even split (dealing in turn gave one process 4 % more of an ASHA search's batches)."""
    shares: List[List[Any]] = [[] for _ in range(cores)]
    loads = [0] * cores
    for run in sorted(runs, key=lambda r: -max(r[1])):
        k = loads.index(min(loads))
        shares[k].append(run)
        loads[k] += max(run[1])
    return shares


def _bare_torch() -> float:
    start = time.perf_counter()
    run_child([sys.executable, "-c", "import torch"], "import torch", 120, env=child_env(threads=1))
    return time.perf_counter() - start


def _startups(stamps: str) -> Tuple[List[float], List[float], List[float]]:
    """(fresh runs', resumed runs') seconds from the spec's write to the first batch's end, and
    promotions in the process: from the end of the rung's validation to the next batch's end."""
    fresh: List[float] = []
    resumed: List[float] = []
    in_process: List[float] = []
    for path in glob.glob(os.path.join(stamps, "*.jsonl")):
        with open(path) as f:
            for line in f:
                s = json.loads(line)
                kind = in_process if s.get("in_process") else resumed if s["resumed"] else fresh
                kind.append(s["first_batch"] - s["spec"])
    return fresh, resumed, in_process


def _pair(kind: str, mode: str, tmp: str, data: str) -> Tuple[float, float, Dict[str, Any], str]:
    """One det-lite search, then the limit of the runs it made, right after it (this box's
    speed drifts within minutes): (det-lite seconds, limit seconds, the limit's job, the
    search's stamp directory)."""
    cores = os.cpu_count() or 1
    stamps = tempfile.mkdtemp(prefix="stamps-", dir=tmp)
    ours, described = _det_lite(tmp, _config(kind, mode, cores, data, stamps), forkserver=True)
    log(f"search {kind}: det-lite {ours:.2f} s (load {os.getloadavg()[0]:.1f})")
    runs = _runs(described)
    points = sorted({p for _, pts in runs for p in pts}) if kind == "adaptive_asha" else [BATCHES[mode]]
    job = {"data_path": data, "cores": cores, "runs": runs, "points": points, "divisor": RUNG_DIVISOR}
    limit = _side("limit", job, tmp) / cores
    log(f"search {kind}: limit {limit:.2f} s")
    return ours, limit, job, stamps


def _one_search(kind: str, mode: str, tmp: str, peers: bool) -> Dict[str, Any]:
    cores = os.cpu_count() or 1
    data = os.path.join(tmp, "digits.npz")
    _warm_server(tmp, _config(kind, mode, cores, data, None))
    pairs = [_pair(kind, mode, tmp, data) for _ in range(PAIRS[mode])]
    job = pairs[-1][2]
    runs = job["runs"]
    fresh, resumed, in_process = (sum(x, []) for x in zip(*(_startups(p[3]) for p in pairs)))
    cold = None
    if kind == "random":  # the first search of a session: its own server's warm-up included
        cold_config = _config(kind, mode, cores, data, tempfile.mkdtemp(dir=tmp))
        cold, _ = _det_lite(tmp, cold_config, forkserver=True, server=uuid.uuid4().hex)
        log(f"search {kind}: det-lite, a server of its own {cold:.2f} s")
    plain = None
    if mode != "quick":  # the lever's gain: ~1.5 min more per search on 2 cores
        config = _config(kind, mode, cores, data, tempfile.mkdtemp(dir=tmp))
        plain, _ = _det_lite(tmp, config, forkserver=False)
    result: Dict[str, Any] = {
        "det_lite": [p[0] for p in pairs],
        "cold": cold,
        "no_forkserver": plain,
        "limit": [p[1] for p in pairs],
        "limit_parallel": _parallel_limit(job, tmp),
        "fresh": fresh,
        "resumed": resumed,
        "in_process": in_process,
        "torch": _bare_torch(),
        "trials": len(runs),
        "batches": sum(max(p) for _, p in runs),
    }
    for side in PEERS if peers else ():
        result[side] = _side(side, job, tmp)
        log(f"search {kind}: {side} {result[side]:.2f} s")
    pairs_text = ", ".join(f"{o:.2f}/{lim:.2f}" for o, lim in zip(result["det_lite"], result["limit"]))
    others = ", ".join(f"{k} {v:.2f}" for k, v in result.items() if isinstance(v, float))
    log(f"search {kind}: det-lite/limit {pairs_text}; {others}")
    log(f"   {os.getloadavg()[0]:.1f} load average (1 min)")
    return result


def run(mode: str, repeats: Optional[int] = None, peers: Any = ()) -> List[Row]:
    repeats = repeats or 1
    rows: List[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        os.makedirs(os.path.join(tmp, "context"))
        with open(os.path.join(tmp, "context", "model_def.py"), "w") as f:
            f.write(MODEL_DEF)
        run_child(
            [
                sys.executable,
                "-c",
                f"import _search_model as m; m.write_digits({os.path.join(tmp, 'digits.npz')!r})",
            ],
            "digits",
            120,
            env=child_env(threads=1),
        )
        starts: Dict[str, List[float]] = {"fresh": [], "resumed": [], "in_process": [], "torch": []}
        for kind, name in (("random", "search_random"), ("adaptive_asha", "search_asha")):
            results = [_one_search(kind, mode, tmp, bool(peers)) for _ in range(repeats)]
            rows.extend(_search_rows(f"{name}_{TRIALS[mode]}_trials", results, bool(peers)))
            for r in results:
                for k in starts:
                    starts[k].extend(r[k] if isinstance(r[k], list) else [r[k]])
        rows.extend(_startup_rows(starts))
        context, data = os.path.join(tmp, "context"), os.path.join(tmp, "digits.npz")
        rows.extend(_search_slots.rows(mode, tmp, context, data, statistics.median(starts["torch"])))
    rows.extend(store_rows(mode))
    return rows


def _search_rows(name: str, results: List[Dict[str, Any]], peers: bool) -> List[Row]:
    row = ratio_row(  # every pair of every repeat: the ratio is the median of the pairs' ratios
        name,
        [x for r in results for x in r["det_lite"]],
        [x for r in results for x in r["limit"]],
        GOAL,
        trials=results[0]["trials"],
        batches=results[0]["batches"],
        lead_peers=peers,
        load_average=os.getloadavg()[0],
    )
    row["pair_ratios"] = [round(o / b, 3) for r in results for o, b in zip(r["det_lite"], r["limit"])]
    row["limit_parallel_s"] = statistics.median(r["limit_parallel"] for r in results)
    row["note"] = (
        f"load {row['load_average']:.1f}; pairs {row['pair_ratios']}; "
        f"the limit's runs in {os.cpu_count()} processes at once {row['limit_parallel_s']:.1f} s"
    )
    if results[0]["no_forkserver"] is not None:
        row["no_forkserver_s"] = statistics.median(r["no_forkserver"] for r in results)
        row["note"] += f"; without the fork server {row['no_forkserver_s']:.1f} s"
    rows = [row]
    limits = [statistics.median(r["limit"]) for r in results]  # what a single-run row is set against
    if results[0]["cold"] is not None:  # reported: the search that starts the session's server
        cold = ratio_row(f"{name}_own_server", [r["cold"] for r in results], limits, None)
        cold["note"] = "a search that starts its own fork server (its warm-up: torch's imports)"
        rows.append(cold)
    for side in PEERS if peers else ():
        peer = ratio_row(name, [r[side] for r in results], limits, GOAL)
        rows.append(peer_row(peer, side))
    if peers:
        row["note"] += "; " + ", ".join(
            f"{p} {statistics.median(r[p] for r in results):.1f} s" for p in PEERS
        )
    return rows


def _startup_rows(starts: Dict[str, List[float]]) -> List[Row]:
    torch_s = statistics.median(starts["torch"])
    goal = torch_s + STARTUP_ABOVE_TORCH_S
    rows = []
    for key, name in (
        ("fresh", "search_trial_startup"),
        ("resumed", "search_asha_promotion"),
        ("in_process", "search_asha_promotion_in_process"),
    ):
        if starts[key]:
            rows.append(
                absolute_row(
                    name,
                    starts[key],
                    goal,
                    bare_import_torch_s=torch_s,
                    note=f"{SPANS[key]}, {len(starts[key])} runs; "
                    f"python -c 'import torch' {torch_s:.2f} s (goal: +{STARTUP_ABOVE_TORCH_S} s)",
                )
            )
    return rows


# --- the store and the CLI at scale -----------------------------------------------------------

STORE_GOAL_S = 0.5
# mode -> (experiments, trials of the big one, training rows per trial, runs)
STORE_SIZES = {"smoke": (50, 10, 1000, 2), "quick": (1000, 100, 10000, 5), "full": (1000, 100, 10000, 9)}


def _timed_runs(argv: List[str], env: Dict[str, str], runs: int) -> Tuple[List[float], List[float], int]:
    """Wall and CPU seconds (the child's user + system) of ``runs`` runs of ``argv`` after one
    untimed run (none for a single run: the store's pages are warm from the others), and the
    lines it printed."""
    import resource

    walls, cpus, lines = [], [], 0
    for i in range(runs + 1 if runs > 1 else 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = proc.stdout.count("\n")
        if i or runs == 1:
            walls.append(wall)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return walls, cpus, lines


def store_rows(mode: str) -> List[Row]:
    """``experiment list`` and ``describe`` (its text tables, ``--json``, and ``--all-workloads``
    once: every one of the 10^6 reports printed) on 1,000 experiments, one of 100 trials with
    10^6 training rows (and 10^4 validation rows); the write path per report
    (``store_write_report``). Wall and CPU time (``cpu_s``), and the load average before."""
    import _cli
    import _dashboard

    experiments, trials, rows, runs = STORE_SIZES[mode]
    out: List[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-search-store-") as home:
        _cli.build_store(home, experiments - 1)
        exp = _dashboard.build_store(home, trials, rows, rows // 100)
        env = child_env(DET_LITE_HOME=home)
        scale = f"{experiments} experiments, {trials} trials x {rows} rows"
        size = f"{trials}_trials_{trials * rows}_rows"
        describe = _cli.det_lite_command() + ["experiment", "describe", str(exp)]
        cases = [
            (f"search_cli_experiment_list_{experiments}", describe[:-2] + ["list"], runs, STORE_GOAL_S),
            (f"search_cli_experiment_describe_{size}", describe, runs, STORE_GOAL_S),
            (f"search_cli_experiment_describe_json_{size}", describe + ["--json"], runs, STORE_GOAL_S),
            (f"search_cli_experiment_describe_all_workloads_{size}", describe + ["--all-workloads"], 1, None),
        ]
        for name, argv, count, goal in cases:
            load = os.getloadavg()[0]
            walls, cpus, lines = _timed_runs(argv, env, count)
            cpu = statistics.median(cpus)
            note = f"{scale}; {lines} lines; CPU {cpu:.2f} s; load {load:.1f}"
            out.append(absolute_row(name, walls, goal, cpu_s=cpu, lines=lines, load=load, note=note))
    out.append(_dashboard.write_row(runs, _dashboard.WRITE_REPORTS[mode]))
    return out
