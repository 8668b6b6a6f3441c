"""The tables of ``experiment describe`` and ``trial describe``: the experiment, its trials and
their workloads, as text tables or CSV (Determined's ``--metrics``, ``--csv``, ``--outdir``).

Workloads have one row per reported batch count of a trial. Without ``--metrics`` their
training and validation metrics are one ``name=value`` column each; with it, one column per
scalar metric (``Training Metric: loss``, ``Validation Metric: accuracy``), full precision in
CSV, so ``pandas.read_csv`` gets numbers.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Dict, List, Optional, Sequence

import click

from determined_lite.cli._common import display_name, display_state, format_mapping, format_time
from determined_lite.cli._table import Cut, Fit, csv_text, echo_table
from determined_lite.store import trial_display_state


@dataclasses.dataclass
class Table:
    title: str  # printed above the table ("Trials")
    filename: str  # its file with --outdir ("trials.csv")
    headers: List[str]
    rows: List[List[Any]]  # raw values: numbers, strings, None, mappings
    fit: Fit = Fit()  # what it gives up on a narrow terminal


TRIAL_HEADERS = [
    "Trial ID",
    "State",
    "H-Params",
    "Seed",
    "Batches",
    "Restarts",
    "Best Validation",
    "Latest Checkpoint",
    "Start Time",
    "End Time",
    "Where",
]


def experiment_table(exp: Dict[str, Any]) -> Table:
    config = exp.get("config")
    searcher = config.get("searcher") if isinstance(config, dict) else None
    row = [
        exp["id"],
        display_name(exp),
        display_state(exp),
        searcher.get("name", "") if isinstance(searcher, dict) else "",
        format_time(exp["created_at"]),
        format_time(exp["ended_at"]),
        exp["context_dir"] or "",
    ]
    headers = ["ID", "Name", "State", "Searcher", "Start Time", "End Time", "Context Directory"]
    fit = Fit(cut={"Context Directory": Cut.START, "Name": Cut.END}, drop=("Context Directory", "End Time"))
    return Table("Experiment", "experiments.csv", headers, [row], fit)


def trials_table(trials: Sequence[Dict[str, Any]]) -> Table:
    rows = [
        [
            t["id"],
            trial_display_state(t),
            t["hparams"],
            t["seed"],
            t["total_batches"],
            t["restarts"],
            t["best_validation"],
            t["latest_checkpoint"] or "",
            format_time(t.get("started_at") or t["created_at"]),  # when it first ran, not was asked for
            format_time(t["ended_at"]),
            _where(t.get("runs") or []),
        ]
        for t in trials
    ]
    fit = Fit(
        cut={"Latest Checkpoint": Cut.END, "H-Params": Cut.ITEMS},
        drop=("Where", "Start Time", "End Time", "Seed", "Restarts", "Latest Checkpoint"),
    )
    return Table("Trials", "trials.csv", list(TRIAL_HEADERS), rows, fit)


def _where(runs: Sequence[Dict[str, Any]]) -> str:
    """Where the trial's latest run was placed: its host, and its GPUs when it held some."""
    if not runs:
        return ""
    run = runs[-1]
    devices = ",".join(run.get("devices") or [])
    return f"{run['host']} gpu {devices}" if devices else str(run["host"])


def _is_scalar(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _scalar_names(trials: Sequence[Dict[str, Any]], key: str) -> List[str]:
    names = {
        name
        for t in trials
        for entry in t[key]
        for name, value in (entry["metrics"] or {}).items()
        if _is_scalar(value) or value is None
    }
    return sorted(names)


def workloads_table(trials: Sequence[Dict[str, Any]], metrics: bool) -> Table:
    """One row per trial and reported batch count: metrics and the checkpoints taken there."""
    training = _scalar_names(trials, "training_metrics") if metrics else []
    validation = _scalar_names(trials, "validation_metrics") if metrics else []
    if metrics:
        headers = (
            ["Trial ID", "# of Batches"]
            + [f"Training Metric: {n}" for n in training]
            + [f"Validation Metric: {n}" for n in validation]
            + ["Checkpoint"]
        )
    else:
        headers = ["Trial ID", "# of Batches", "Training Metrics", "Validation Metrics", "Checkpoint"]
    rows: List[List[Any]] = []
    for t in trials:
        by_batch: Dict[int, Dict[str, Any]] = {}
        for key in ("training_metrics", "validation_metrics"):
            for entry in t[key]:
                by_batch.setdefault(entry["total_batches"], {})[key] = entry["metrics"] or {}
        for ckpt in t["checkpoints"]:
            by_batch.setdefault(ckpt["total_batches"], {}).setdefault("checkpoint", []).append(ckpt["uuid"])
        for batches, found in sorted(by_batch.items()):
            train, val = found.get("training_metrics"), found.get("validation_metrics")
            if metrics:
                cells = [(train or {}).get(n) for n in training] + [(val or {}).get(n) for n in validation]
            else:
                cells = [train, val]
            rows.append([t["id"], batches, *cells, " ".join(found.get("checkpoint", []))])
    text_columns = ["Checkpoint", "Training Metrics", "Validation Metrics"]
    fit = Fit(cut={name: Cut.ITEMS for name in text_columns}, drop=headers[2:-1] if metrics else ())
    return Table("Workloads", "workloads.csv", headers, rows, fit)


def _text_cell(value: Any) -> Any:
    if isinstance(value, dict):
        return format_mapping(value)
    return value  # render_table formats numbers (6 significant digits) and aligns them


def to_csv(table: Table) -> str:
    return csv_text(table.headers, table.rows)


def emit(tables: Sequence[Table], as_csv: bool, outdir: Optional[str]) -> None:
    """Print the tables (``as_csv``: as CSV, each under its title), or write one CSV file per
    table into ``outdir`` (created) and say where."""
    if outdir is not None:
        os.makedirs(outdir, exist_ok=True)
        for table in tables:
            path = os.path.join(outdir, table.filename)
            with open(path, "w", newline="") as f:
                f.write(to_csv(table))
            click.echo(f"Wrote {path}")
        return
    for i, table in enumerate(tables):
        click.echo(("\n" if i else "") + f"{table.title}:")
        if as_csv:
            click.echo(to_csv(table), nl=False)
        else:
            echo_table(table.headers, [[_text_cell(v) for v in row] for row in table.rows], table.fit)


def output_options(command: Any) -> Any:
    """``--metrics``, ``--csv`` and ``--outdir`` (Determined's), for the describe commands."""
    command = click.option(
        "--outdir",
        type=click.Path(file_okay=False),
        default=None,
        help="Write experiments.csv, trials.csv and workloads.csv into this directory.",
    )(command)
    command = click.option("--csv", "as_csv", is_flag=True, help="Print the tables as CSV.")(command)
    return click.option(
        "--metrics", is_flag=True, help="One column per scalar training and validation metric."
    )(command)


def check_output_options(as_json: bool, as_csv: bool, outdir: Optional[str]) -> None:
    if as_json and (as_csv or outdir):
        raise click.UsageError("--json cannot be combined with --csv or --outdir")
