"""``det-lite experiment ...`` (alias ``e``): create, list, describe, logs, pause, activate, kill, delete."""

from __future__ import annotations

import os
from typing import Callable, List, NoReturn, Optional, Sequence, Tuple, Type

import click

from determined_lite.cli._common import (
    EXIT_FAILED,
    AliasedGroup,
    BadInput,
    Failed,
    display_name,
    display_state,
    echo_json,
    experiment_finished,
    format_time,
    get_experiment,
    open_store,
    warn,
)
from determined_lite.cli._describe import (
    check_output_options,
    emit_workloads,
    experiment_json,
    experiment_table,
    output_options,
    trials_table,
)
from determined_lite.cli._logs import print_logs
from determined_lite.cli._table import Cut, Fit, echo_rows
from determined_lite.store import Action, det_lite_home

DEFAULT_LIST_LIMIT = 100
ALIASES = {"ls": "list", "lt": "list-trials", "unpause": "activate"}
LIST_FIT = Fit(cut={"Name": Cut.END}, drop=("End Time", "Start Time"))


@click.group("experiment", cls=AliasedGroup, aliases=ALIASES)
def experiment() -> None:
    """Create and manage experiments."""


# --- create / activate (these run trials: the experiment layer imports torch, lazily) ----------


def _config_errors() -> Tuple[Type[BaseException], ...]:
    try:
        from determined_lite.config import ConfigError
    except ImportError:
        return ()
    return (ConfigError,)


def exit_with(ctx: click.Context, call: Callable[[], int]) -> NoReturn:
    """Exit with the code of ``call`` (into the experiment layer, which imports torch when it runs
    trials); a config error or a request the experiment's state refuses is bad input (2); a full
    disk is one line and a failure (1)."""
    from determined_lite._errors import DiskFullError, is_disk_full
    from determined_lite.experiment import ActivationRefused

    bad_input: Tuple[Type[BaseException], ...] = (ActivationRefused, *_config_errors())
    try:
        code = call()
    except click.UsageError:
        raise
    except bad_input as e:
        raise BadInput(str(e)) from None
    except OSError as e:
        if not is_disk_full(e):
            raise
        if isinstance(e, DiskFullError):
            raise Failed(str(e)) from None
        where = os.path.dirname(e.filename) if isinstance(e.filename, str) else det_lite_home()
        raise Failed(f"no space left on {where} ({e.strerror})") from None
    ctx.exit(int(code))


def parse_overrides(overrides: Sequence[str]) -> List[str]:
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE (e.g. hyperparameters.lr=0.1), got {item!r}")
    return list(overrides)


@experiment.command("create", short_help="Create an experiment and run it.")
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("context_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--config",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config field (dotted key, YAML value), e.g. --config hyperparameters.lr=0.1.",
)
@click.option("--detach", is_flag=True, help="Run in the background and return the experiment id at once.")
@click.option(
    "-f",
    "--follow",
    "--follow-first-trial",
    "follow",
    is_flag=True,
    help="Determined's flag: stay and show the run (what det-lite does without --detach).",
)
@click.option("--test", "test_mode", is_flag=True, help="Run a short test of the trial instead.")
@click.pass_context
def create(
    ctx: click.Context,
    config_file: str,
    context_dir: str,
    overrides: Tuple[str, ...],
    detach: bool,
    follow: bool,
    test_mode: bool,
) -> None:
    """Create an experiment from CONFIG_FILE with the trial code in CONTEXT_DIR, and run it.

    In the foreground (this terminal shows its progress until it ends), exits 0 only when the
    experiment COMPLETED. Ctrl-C pauses it: its trials stop at their next scheduling-unit
    boundary with a checkpoint (a second Ctrl-C stops them at once); `det-lite experiment
    activate ID` resumes it.
    """
    if detach and follow:
        raise click.UsageError("--detach returns at once; -f/--follow stays with the run: give one")
    parsed = parse_overrides(overrides)
    from determined_lite.experiment import create_experiment

    exit_with(ctx, lambda: create_experiment(config_file, context_dir, parsed, detach=detach, test=test_mode))


@experiment.command("activate", short_help="Resume a paused experiment (in the foreground).")
@click.argument("experiment_id", type=int)
@click.option("--detach", is_flag=True, help="Resume in the background and return at once.")
@click.pass_context
def activate(ctx: click.Context, experiment_id: int, detach: bool) -> None:
    """Resume a PAUSED experiment from its trials' latest checkpoints.

    Unlike Determined's (which asks the master and returns), this runs the experiment in this
    terminal, with its progress bars, until it ends, as `experiment create` does; --detach runs
    it in the background instead. Ctrl-C pauses it again: its trials stop at their next
    scheduling-unit boundary with a checkpoint (a second Ctrl-C stops them at once).
    """
    from determined_lite.experiment import activate_experiment

    exit_with(ctx, lambda: activate_experiment(experiment_id, detach=detach))


# --- read ---------------------------------------------------------------------------------------


@experiment.command("list", short_help="List experiments.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help=f"List every experiment (default: the newest {DEFAULT_LIST_LIMIT}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (every column, whole).")
def list_experiments(show_all: bool, as_json: bool, as_csv: bool) -> None:
    """List experiments, oldest first."""
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    store = open_store()
    limit = None if show_all else DEFAULT_LIST_LIMIT
    exps = store.experiments.list(limit=limit, with_config=as_json)
    if as_json:
        echo_json(exps)
        return
    rows = [
        (
            e["id"],
            display_name(e),
            display_state(e),
            e["num_trials"],
            format_time(e["created_at"]),
            format_time(e["ended_at"]),
        )
        for e in exps
    ]
    echo_rows(["ID", "Name", "State", "Trials", "Start Time", "End Time"], rows, LIST_FIT, as_csv)
    if limit is not None and len(exps) == limit:
        total = store.experiments.count()
        if total > limit:
            click.echo(f"(the newest {limit} of {total} experiments; --all lists every one)", err=True)


def _experiment_ids(text: str) -> List[int]:
    """Determined's ``EXPERIMENT_IDS``: one id or a comma-separated list (``1,4``)."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        ids = []
    if not ids or min(ids) < 1:
        raise click.BadParameter(f"expected an experiment id or a comma-separated list of them, got {text!r}")
    return list(dict.fromkeys(ids))


@experiment.command("describe", short_help="Show trials, metrics, checkpoints.")
@click.argument("experiment_ids", metavar="EXPERIMENT_IDS")
@click.option("--json", "as_json", is_flag=True, help="Print the experiments as JSON (Determined's form).")
@output_options
def describe(
    experiment_ids: str,
    as_json: bool,
    metrics: bool,
    as_csv: bool,
    outdir: Optional[str],
    all_workloads: bool,
) -> None:
    """Show experiments (an id, or a comma-separated list), their trials and their workloads:
    metrics and checkpoints by batch count."""
    check_output_options(as_json, as_csv, outdir)
    ids = _experiment_ids(experiment_ids)
    store = open_store()
    exps = []
    for experiment_id in ids:
        exp = store.experiments.describe(experiment_id, metrics=False)
        if exp is None:
            raise BadInput(f"experiment {experiment_id} not found")
        exps.append(exp)
    if as_json:
        echo_json([experiment_json(exp) for exp in exps])
        return
    trials = [t for exp in exps for t in exp["trials"]]
    tables = [experiment_table(exps), trials_table(trials)]
    emit_workloads(store, tables, trials, (metrics, all_workloads, as_csv, outdir))


@experiment.command("logs", short_help="Print an experiment's logs.")
@click.argument("experiment_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the experiment stops.")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with its UTC time.")
def logs(experiment_id: int, follow: bool, tail: int, timestamps: bool) -> None:
    """Print the experiment's log lines (all its trials, and the experiment's own)."""
    store = open_store()
    get_experiment(store, experiment_id)
    print_logs(
        lambda **kw: store.logs.list(experiment_id=experiment_id, **kw),
        tail,
        follow,
        lambda: experiment_finished(store, experiment_id),
        with_trial=True,
        timestamps=timestamps,
    )


# --- control ------------------------------------------------------------------------------------


def _apply(experiment_id: int, action: Action) -> None:
    store = open_store()
    get_experiment(store, experiment_id)
    from determined_lite.experiment._control import control_experiment

    for line in control_experiment(store, experiment_id, action):
        click.echo(line)


@experiment.command("pause", short_help="Pause an experiment at a checkpoint.")
@click.argument("experiment_id", type=int)
def pause(experiment_id: int) -> None:
    """Pause an experiment: its trials checkpoint and stop; `activate` resumes them."""
    _apply(experiment_id, Action.PAUSE)


@experiment.command("kill", short_help="Cancel an experiment.")
@click.argument("experiment_id", type=int)
def kill(experiment_id: int) -> None:
    """Cancel an experiment: its trials stop at the next scheduling-unit boundary."""
    _apply(experiment_id, Action.KILL)


@experiment.command("delete", short_help="Delete an experiment and its files.")
@click.argument("experiment_id", type=int)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def delete(ctx: click.Context, experiment_id: int, yes: bool) -> None:
    """Delete a finished or paused experiment: its records, checkpoints (registered or not),
    TensorBoard files and run directory ($DET_LITE_HOME/experiments/ID, with the context snapshot)."""
    from determined_lite.experiment._gc import DeleteRefused, check_deletable, delete_experiment

    store = open_store()
    exp = get_experiment(store, experiment_id)
    try:
        check_deletable(store, exp)
    except DeleteRefused as e:
        raise BadInput(str(e)) from None
    if not yes and not click.confirm(
        f"Delete experiment {experiment_id} with its checkpoints and TensorBoard files?", default=False
    ):
        click.echo("Nothing deleted.", err=True)
        ctx.exit(EXIT_FAILED)
    from determined_lite.experiment._gc import Fate

    checkpoints, report = delete_experiment(store, exp)
    for problem in report.notes + report.problems:
        warn(problem)
    for fate, path, why in report.actions:
        if fate == Fate.BUSY:
            warn(f"left {path} ({why}); `det-lite checkpoint gc` removes it later")
    click.echo(f"Deleted experiment {experiment_id} ({len(checkpoints)} checkpoint(s)).")
    if report.problems:
        ctx.exit(EXIT_FAILED)
