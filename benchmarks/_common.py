"""What every measure shares: paths, worker environments, timing statistics, result rows, the table.

Torch-free on purpose: ``run.py`` imports it before deciding which measures (and so which
heavy imports) run.

A result row is a dict with at least ``name``, ``det_lite_s``, ``baseline_s``, ``ratio`` and
``goal``:

* ratio measures: ``det_lite_s``/``baseline_s`` are medians over repeats of each side's
  per-repeat median; ``ratio`` is the median over repeats of the *paired* ratio (each det-lite
  repeat divided by the baseline repeat run right beside it), so load changes on a shared
  machine cancel out; ``goal`` is the ratio to stay at or under.
* absolute measures: ``baseline_s`` and ``ratio`` are ``None``; ``goal`` is in seconds (or
  ``None`` when the number is only reported).
* peer rows (``--peers``): the same case run by another framework (``framework``: lightning,
  fabric or accelerate; ``case``: det-lite's row name) against the same baseline; its time is
  ``peer_s`` (``det_lite_s`` is ``None``) and it has no goal. A det-lite row whose goal includes
  having the lowest ratio of all frameworks has ``lead_peers``; with peers measured it gets
  ``peer_ratios`` and ``lowest_ratio``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

Row = Dict[str, Any]
T = TypeVar("T")
DET_LITE = "det-lite"  # the ``framework`` of det-lite's own rows


# --- environment ------------------------------------------------------------------------------


def pythonpath() -> str:
    """``PYTHONPATH`` for child processes: the repo and this folder first."""
    parts = [REPO, HERE]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def _pycache() -> str:
    """The benchmark children's bytecode cache: ``$XDG_CACHE_HOME/det-lite/bench-pycache``
    (``~/.cache``), the user's own (0700), kept between runs as ``__pycache__`` folders are."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "det-lite", "bench-pycache")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def child_env(threads: int = 1, **extra: str) -> Dict[str, str]:
    """Environment of a benchmark child process: ``threads`` intra-op threads, repo importable.

    Children cache their bytecode as Python does by default (in a cache folder of the user's):
    a machine with ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module of an
    editable install (det-lite's, the benchmark's) in every command, which no user pays after
    their first command (about 0.2 s a command here), while installed peers load theirs."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        {
            "PYTHONPATH": pythonpath(),
            "PYTHONPYCACHEPREFIX": _pycache(),
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def run_child(argv: Sequence[str], what: str, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """Run a child to completion; a failure or a timeout raises with the end of its output."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-3000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-3000:]
        raise RuntimeError(f"{what} took longer than {timeout:.0f} s:\n{out}") from None
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def torchrun_argv(script: str, args: Sequence[str], nproc: int = 2) -> List[str]:
    """``python -m torch.distributed.run`` starting ``nproc`` workers of ``script`` on this host."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    argv += ["--nproc-per-node", str(nproc), "--max-restarts", "0", "--monitor-interval", "0.1"]
    return argv + [script, *args]


def horovodrun_argv(script: str, args: Sequence[str], nproc: int = 2) -> List[str]:
    """``horovodrun`` (Gloo, loopback) starting ``nproc`` workers of ``script`` on this host."""
    exe = shutil.which("horovodrun")
    if exe is None:
        raise RuntimeError("horovodrun is not on PATH; install Horovod (bash scripts/install-horovod.sh)")
    argv = [exe, "-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo", "--network-interfaces", "lo"]
    argv += ["--start-timeout", "60", "--disable-cache"]
    return argv + [sys.executable, "-u", script, *args]


# --- statistics -------------------------------------------------------------------------------


def alternate(repeats: int, det_lite: Callable[[], T], baseline: Callable[[], T]) -> Tuple[List[T], List[T]]:
    """Run both sides ``repeats`` times in ABBA order (det-lite first on even repeats, the baseline
    first on odd ones), so a steady drift of machine load favours neither side."""
    ours: List[T] = []
    base: List[T] = []
    for i in range(repeats):
        if i % 2 == 0:
            ours.append(det_lite())
            base.append(baseline())
        else:
            base.append(baseline())
            ours.append(det_lite())
    return ours, base


def paired_ratio(ours: Sequence[float], base: Sequence[float]) -> float:
    """Median over repeats of ``ours[i] / base[i]`` (the two runs of a pair ran side by side)."""
    return statistics.median(a / b for a, b in zip(ours, base))


def ratio_row(
    name: str,
    ours: Sequence[float],
    base: Sequence[float],
    goal: Optional[float],
    ratios: Optional[Sequence[float]] = None,
    **extra: Any,
) -> Row:
    """A ratio measure from per-repeat det-lite and baseline values (seconds).

    The ratio is the median of ``ratios`` (per-repeat ratios measured some finer way) when
    given, else the median of the paired ``ours[i] / base[i]``.
    """
    if len(ours) != len(base) or not ours:
        raise ValueError(f"{name}: {len(ours)} det-lite and {len(base)} baseline repeats")
    row: Row = {
        "name": name,
        "det_lite_s": statistics.median(ours),
        "baseline_s": statistics.median(base),
        "ratio": statistics.median(ratios) if ratios else paired_ratio(ours, base),
        "goal": goal,
        "repeats": len(ours),
    }
    row.update(extra)
    return row


def lockstep_row(
    name: str, results: Sequence[Tuple[Sequence[float], Sequence[float]]], goal: float, **extra: Any
) -> Row:
    """A ratio measure from lockstep repeats, each ``(det_lite steps, baseline steps)`` paired by
    batch: per repeat the median step of each side and the median per-batch ratio; ``ratio_mean``
    is the median over repeats of total det-lite time over total baseline time."""
    return ratio_row(
        name,
        [statistics.median(d) for d, _ in results],
        [statistics.median(b) for _, b in results],
        goal,
        ratios=[statistics.median(x / y for x, y in zip(d, b)) for d, b in results],
        ratio_mean=statistics.median(sum(d) / sum(b) for d, b in results),
        **extra,
    )


def peer_row(row: Row, framework: str) -> Row:
    """``row``, measured with a peer framework instead of det-lite, as a peer row (no goal)."""
    case = row["name"]
    out: Row = {**row, "name": f"{case}.{framework}", "case": case, "framework": framework}
    out.update(peer_s=row["det_lite_s"], det_lite_s=None, goal=None)
    return out


def is_peer(row: Mapping[str, Any]) -> bool:
    return row.get("framework", DET_LITE) != DET_LITE


def compare_peers(rows: Sequence[Row]) -> None:
    """Annotate every det-lite row that peers also ran with their ratios (``peer_ratios``); a row
    with ``lead_peers`` also gets ``lowest_ratio``: whether its ratio is the lowest of all."""
    for row in rows:
        if is_peer(row) or row.get("ratio") is None:
            continue
        peers = {
            r["framework"]: r["ratio"]
            for r in rows
            if is_peer(r) and r.get("case") == row["name"] and r.get("ratio") is not None
        }
        if not peers:
            continue
        row["peer_ratios"] = peers
        if row.get("lead_peers"):
            row["lowest_ratio"] = row["ratio"] <= min(peers.values())


def absolute_row(name: str, values: Sequence[float], goal: Optional[float], **extra: Any) -> Row:
    """An absolute measure: the median of ``values`` seconds against a goal in seconds (or none)."""
    row: Row = {
        "name": name,
        "det_lite_s": statistics.median(values),
        "baseline_s": None,
        "ratio": None,
        "goal": goal,
        "repeats": len(values),
    }
    row.update(extra)
    return row


def passed(row: Mapping[str, Any]) -> Optional[bool]:
    """Whether the row meets its goal (``None`` when it has none)."""
    if row.get("goal") is None:
        return None
    value = row["ratio"] if row.get("ratio") is not None else row["det_lite_s"]
    ok = value <= row["goal"]
    if row.get("lowest_ratio") is False:
        ok = False
    if row.get("collectives") is not None and row.get("collectives_goal") is not None:
        ok = ok and row["collectives"] <= row["collectives_goal"]
    return ok


# --- output -----------------------------------------------------------------------------------


def _seconds(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} us"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.3f} s"


def _value(row: Mapping[str, Any], side: str) -> str:
    """A side's number: seconds, or MiB for a measure of memory (``*_bytes``)."""
    if row.get(f"{side}_bytes") is not None:
        return f"{row[f'{side}_bytes'] / 2**20:.1f} MiB"
    return _seconds(row.get(f"{side}_s"))


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The results as a fixed-width text table (also valid Markdown)."""
    header = ["name", "det_lite", "baseline", "ratio", "goal", "result", "notes"]
    lines = []
    for r in rows:
        ok = passed(r)
        goal = (
            "-"
            if r.get("goal") is None
            else (f"<= {r['goal']:.2f}" if r.get("ratio") is not None else f"<= {r['goal']:.2f} s")
        )
        notes = []
        if r.get("collectives") is not None:
            notes.append(f"collectives/reduction {r['collectives']} (goal {r.get('collectives_goal')})")
        if r.get("ratio_mean") is not None:
            notes.append(f"mean-step ratio {r['ratio_mean']:.3f}")
        if r.get("aa_ratio") is not None:
            notes.append(f"A/A ratio {r['aa_ratio']:.3f}")
        if r.get("lowest_ratio") is not None:
            best = min(r["peer_ratios"], key=r["peer_ratios"].get)
            lead = "lowest of all" if r["lowest_ratio"] else "NOT the lowest"
            notes.append(f"{lead} (best peer: {best} {r['peer_ratios'][best]:.3f})")
        if r.get("fsync_s") is not None:
            notes.append(f"+ fsync {_seconds(r['fsync_s'])} in the background")
        if r.get("ratio_with_fsync") is not None:
            notes.append(f"ratio had the loop waited for it {r['ratio_with_fsync']:.3f}")
        if r.get("note"):
            notes.append(str(r["note"]))
        lines.append(
            [
                str(r["name"]),
                _value(r, "det_lite"),
                _value(r, "baseline"),
                "-" if r.get("ratio") is None else f"{r['ratio']:.3f}",
                goal,
                "reported" if ok is None else ("pass" if ok else "MISS"),
                "; ".join(notes),
            ]
        )
    return _markdown(header, lines)


def format_peer_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """det-lite beside its peers: per case that peers ran, one line per framework, by ratio."""
    header = ["case", "framework", "time", "baseline", "ratio", "notes"]
    aa = {r["name"]: r["aa_ratio"] for r in rows if not is_peer(r) and r.get("aa_ratio") is not None}
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows if is_peer(r)):
        group = [r for r in rows if r["name"] == case or r.get("case") == case]
        for r in sorted(group, key=lambda r: (r.get("ratio") is None, r.get("ratio") or 0.0)):
            notes = []
            if r.get("ratio_mean") is not None:
                notes.append(f"mean-step ratio {r['ratio_mean']:.3f}")
            if r.get("collectives") is not None:
                notes.append(f"{r['collectives']} collective(s) per validation")
            if not is_peer(r) and case in aa:
                notes.append(f"A/A ratio {aa[case]:.3f}")
            lines.append(
                [
                    case,
                    str(r.get("framework", DET_LITE)),
                    _seconds(r["peer_s"] if is_peer(r) else r.get("det_lite_s")),
                    _seconds(r.get("baseline_s")),
                    "-" if r.get("ratio") is None else f"{r['ratio']:.3f}",
                    "; ".join(notes),
                ]
            )
    return _markdown(header, lines)


def _markdown(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    widths = [max([len(header[i])] + [len(line[i]) for line in lines]) for i in range(len(header))]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"]
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |")
    return "\n".join(out)


def log(message: str) -> None:
    """Progress on stderr (stdout carries the table or the JSON)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
