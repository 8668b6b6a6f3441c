"""The tables of ``experiment describe`` and ``trial describe``: the experiment, its trials and
their workloads, as text tables or CSV (Determined's ``--metrics``, ``--csv``, ``--outdir``), and
``experiment describe --json`` in Determined's form.

Workloads have one row per reported batch count of a trial (Determined condenses the training,
checkpoint and validation workloads of a batch count into one row). The text table shows the
rows a reader looks for, as Determined's web UI does by default ("Has Checkpoint or
Validation"), plus each trial's latest training report; ``--all-workloads`` shows every
training report, and ``--csv`` and ``--outdir`` always write every row, as Determined's CLI.
Without ``--metrics`` training and validation metrics are one ``name=value`` column each; with
it, one column per scalar metric (``Training Metric: loss``, ``Validation Metric: accuracy``),
full precision in CSV, so ``pandas.read_csv`` gets numbers.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import getpass
import json
import numbers
import os
import sys
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import click

from determined_lite.cli._common import display_name, display_state, format_mapping, format_time, format_value
from determined_lite.cli._table import Cut, Fit, echo_chunks, echo_table, write_csv
from determined_lite.store import Store, Workload, trial_display_state


@dataclasses.dataclass
class Table:
    title: str  # printed above the table ("Trials")
    filename: str  # its file with --outdir ("trials.csv")
    headers: List[str]
    rows: List[List[Any]]  # raw values: numbers, strings, None, mappings
    fit: Fit = Fit()  # what it gives up on a narrow terminal
    # Instead of ``rows``: the rows read on demand, a chunk at a time (each call reads them again).
    chunks: Optional[Callable[[], Iterator[List[List[Any]]]]] = None


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


def experiment_table(exps: Sequence[Dict[str, Any]]) -> Table:
    rows = []
    for exp in exps:
        config = exp.get("config")
        searcher = config.get("searcher") if isinstance(config, dict) else None
        rows.append(
            [
                exp["id"],
                display_name(exp),
                display_state(exp),
                searcher.get("name", "") if isinstance(searcher, dict) else "",
                format_time(exp["created_at"]),
                format_time(exp["ended_at"]),
                exp["context_dir"] or "",
            ]
        )
    headers = ["ID", "Name", "State", "Searcher", "Start Time", "End Time", "Context Directory"]
    fit = Fit(cut={"Context Directory": Cut.START, "Name": Cut.END}, drop=("Context Directory", "End Time"))
    return Table("Experiment", "experiments.csv", headers, rows, fit)


def _rfc3339(ts: Optional[float]) -> Optional[str]:
    """Determined's timestamps in JSON: ``2026-11-27T18:30:44.123456Z`` (UTC)."""
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _best_trial(trials: Sequence[Dict[str, Any]], smaller_is_better: bool) -> Optional[Dict[str, Any]]:
    scored = [t for t in trials if t["best_validation"] is not None]
    if not scored:
        return None
    pick = min if smaller_is_better else max
    return pick(scored, key=lambda t: t["best_validation"])


def _username() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name, no passwd entry (some containers)
        return ""


def experiment_json(exp: Dict[str, Any]) -> Dict[str, Any]:
    """``experiment describe --json``'s entry for one experiment: Determined's
    ``GetExperimentResponse`` (``{"experiment", "config", "jobSummary"}``) with the fields of its
    ``experiment`` that det-lite knows, and every field Determined's bindings require; no trials
    or workloads (``trial describe --json`` and the Python SDK have those)."""
    config = exp["config"] if isinstance(exp["config"], dict) else {}
    searcher: Dict[str, Any] = config["searcher"] if isinstance(config.get("searcher"), dict) else {}
    trials = exp["trials"]
    from determined_lite.config import DEFAULT_SMALLER_IS_BETTER  # the --json path alone needs it

    smaller = searcher.get("smaller_is_better")
    best = _best_trial(trials, DEFAULT_SMALLER_IS_BETTER if smaller is None else bool(smaller))
    ended = exp["ended_at"]
    experiment = {
        "id": exp["id"],
        "name": exp["name"] or "",
        "username": _username(),
        "projectId": 1,  # Determined's default project and its owner (the admin user)
        "projectOwnerId": 1,
        "jobId": "",  # no job queue here
        "originalConfig": json.dumps(config),  # YAML's flow form of the stored config
        "description": config.get("description") or "",
        "state": f"STATE_{exp['state']}",
        "archived": False,
        "config": config,
        "hyperparameters": config.get("hyperparameters") or {},
        "searcherType": searcher.get("name", ""),
        "searcherMetric": searcher.get("metric"),
        "startTime": _rfc3339(exp["created_at"]),
        "endTime": _rfc3339(ended),
        "duration": None if ended is None else int(round((ended - exp["created_at"]) * 1000)),
        "numTrials": len(trials),
        "trialIds": [t["id"] for t in trials],
        "bestTrialId": None if best is None else best["id"],
        "bestTrialSearcherMetric": None if best is None else best["best_validation"],
        "checkpointCount": sum(len(t["checkpoints"]) for t in trials),
        "labels": exp.get("labels") or [],
        "notes": exp.get("notes") or "",
        "unmanaged": False,
    }
    return {"experiment": experiment, "config": config, "jobSummary": None}


class KeptOrder(dict):
    """A mapping that text tables show in its own order (others are shown sorted by key)."""


def varying_first(trials: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each trial's hyperparameters with those whose values differ across ``trials`` first
    (then the others, each group by name; a :class:`KeptOrder`): a narrow H-Params column
    shows what was searched."""
    params = [t["hparams"] or {} for t in trials]
    names = sorted({name for hp in params for name in hp})

    def varies(name: str) -> bool:
        seen = {json.dumps([name in hp, hp.get(name)], sort_keys=True, default=str) for hp in params}
        return len(seen) > 1

    order = sorted(names, key=lambda name: not varies(name))
    return [KeptOrder((k, hp[k]) for k in order if k in hp) for hp in params]


def trials_table(trials: Sequence[Dict[str, Any]]) -> Table:
    hparams = varying_first(trials)
    rows = [
        [
            t["id"],
            trial_display_state(t),
            hparams[i],
            t["seed"],
            t["total_batches"],
            t["restarts"],
            t["best_validation"],
            t["latest_checkpoint"] or "",
            format_time(t.get("started_at") or t["created_at"]),  # when it first ran, not was asked for
            format_time(t["ended_at"]),
            _where(t.get("runs") or []),
        ]
        for i, t in enumerate(trials)
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


def _scalar_names(source: WorkloadSource, field: str) -> List[str]:
    names = {
        name
        for chunk in source()
        for row in chunk
        for name, value in (getattr(row, field) or {}).items()
        if _is_scalar(value) or value is None
    }
    return sorted(names)


WorkloadSource = Callable[[], Iterable[Sequence[Workload]]]


def stream_workloads(store: Store, trials: Sequence[Dict[str, Any]]) -> WorkloadSource:
    """Every workload row of the trials, read a trial at a time whenever the result is called."""
    ids = [t["id"] for t in trials]
    return lambda: (store.metrics.workloads([trial_id], every=True)[0] for trial_id in ids)


def workloads_table(rows: Union[Sequence[Workload], WorkloadSource], metrics: bool) -> Table:
    """One row per trial and reported batch count: metrics and the checkpoints taken there.
    ``rows``: the rows, or where to read them (then the table reads them when shown)."""
    source: WorkloadSource = rows if callable(rows) else (lambda: [rows])
    training = _scalar_names(source, "training") if metrics else []
    validation = _scalar_names(source, "validation") if metrics else []
    if metrics:
        headers = (
            ["Trial ID", "# of Batches"]
            + [f"Training Metric: {n}" for n in training]
            + [f"Validation Metric: {n}" for n in validation]
            + ["Checkpoint"]
        )
    else:
        headers = ["Trial ID", "# of Batches", "Training Metrics", "Validation Metrics", "Checkpoint"]

    def cells(chunk: Sequence[Workload]) -> List[List[Any]]:
        out = []
        for row in chunk:
            if metrics:
                train, val = row.training or {}, row.validation or {}
                values = [train.get(n) for n in training] + [val.get(n) for n in validation]
            else:
                values = [row.training, row.validation]
            out.append([row.trial_id, row.total_batches, *values, " ".join(row.checkpoints)])
        return out

    text_columns = ["Checkpoint", "Training Metrics", "Validation Metrics"]
    fit = Fit(cut={name: Cut.ITEMS for name in text_columns}, drop=headers[2:-1] if metrics else ())
    if callable(rows):
        return Table("Workloads", "workloads.csv", headers, [], fit, lambda: (cells(c) for c in source()))
    return Table("Workloads", "workloads.csv", headers, cells(rows), fit)


LEFT_OUT_NOTE = (
    "(workloads: each trial's validations, checkpoints and latest training report;"
    " --all-workloads shows every training report)"
)


def _text_cell(value: Any) -> Any:
    if isinstance(value, KeptOrder):
        return " ".join(f"{k}={format_value(v)}" for k, v in value.items())
    if isinstance(value, dict):
        return format_mapping(value)
    return value  # render_table formats numbers (6 significant digits) and aligns them


def _chunks(table: Table) -> Iterator[List[List[Any]]]:
    return table.chunks() if table.chunks is not None else iter([table.rows])


def _text_rows(chunk: List[List[Any]]) -> List[List[Any]]:
    return [[_text_cell(v) for v in row] for row in chunk]


def _text_chunks(table: Table) -> Iterator[List[List[Any]]]:
    return (_text_rows(chunk) for chunk in _chunks(table))


def emit(tables: Sequence[Table], as_csv: bool, outdir: Optional[str]) -> None:
    """Print the tables (``as_csv``: as CSV, each under its title), or write one CSV file per
    table into ``outdir`` (created) and say where. A table read in chunks is written a chunk
    at a time (a text table reads them twice: widths, then lines)."""
    if outdir is not None:
        os.makedirs(outdir, exist_ok=True)
        for table in tables:
            path = os.path.join(outdir, table.filename)
            with open(path, "w", newline="") as f:
                write_csv(f, table.headers, _chunks(table))
            click.echo(f"Wrote {path}")
        return
    for i, table in enumerate(tables):
        click.echo(("\n" if i else "") + f"{table.title}:")
        if as_csv:
            write_csv(sys.stdout, table.headers, _chunks(table))
            sys.stdout.flush()
        elif table.chunks is not None:
            echo_chunks(table.headers, functools.partial(_text_chunks, table), table.fit)
        else:
            echo_table(table.headers, _text_rows(table.rows), table.fit)


def output_options(command: Any) -> Any:
    """``--metrics``, ``--csv`` and ``--outdir`` (Determined's) and ``--all-workloads``, for the
    describe commands."""
    command = click.option(
        "--all-workloads",
        "all_workloads",
        is_flag=True,
        help="Show every training report in the workloads table (default: each trial's validations,"
        " checkpoints and latest training report; --csv and --outdir always have every row).",
    )(command)
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


def emit_workloads(
    store: Store,
    tables: List[Table],
    trials: Sequence[Dict[str, Any]],
    options: Tuple[bool, bool, bool, Optional[str]],
) -> None:
    """``tables`` and then the trials' workloads table, read and shown as ``options``
    (``metrics, all_workloads, as_csv, outdir``) ask; on a text table whose training rows were
    left out, one line on stderr says so."""
    metrics, all_workloads, as_csv, outdir = options
    if all_workloads or as_csv or outdir is not None:
        emit([*tables, workloads_table(stream_workloads(store, trials), metrics)], as_csv, outdir)
        return
    rows, left_out = store.metrics.workloads([t["id"] for t in trials])
    emit([*tables, workloads_table(rows, metrics)], as_csv, outdir)
    if left_out:
        click.echo(LEFT_OUT_NOTE, err=True)
