"""Determined's other ``det experiment`` verbs: ``wait``, ``list-trials`` (``lt``), ``set
description|name``, ``label add|remove`` and ``fork`` (a new experiment from another's config
and code). ``cli/__init__.py`` adds :data:`COMMANDS` to the ``experiment`` group."""

from __future__ import annotations

import os
import tempfile
import time
from typing import List, Optional, Tuple

import click

from determined_lite.cli._common import (
    EXIT_FAILED,
    AliasedGroup,
    BadInput,
    Failed,
    echo_json,
    format_time,
    get_experiment,
    open_store,
)
from determined_lite.cli._describe import varying_first
from determined_lite.cli._table import Cut, Fit, echo_rows
from determined_lite.store import (
    TERMINAL_STATES,
    ExperimentState,
    context_snapshot_dir,
    trial_display_state,
)

TRIALS_FIT = Fit(cut={"H-Params": Cut.END}, drop=("Started", "Ended"))


@click.command("wait", short_help="Wait for an experiment to end.")
@click.argument("experiment_id", type=int)
@click.option(
    "--polling-interval",
    type=click.FloatRange(min=0.01),
    default=5.0,
    show_default=True,
    help="Seconds between looks at the experiment's state.",
)
@click.pass_context
def wait(ctx: click.Context, experiment_id: int, polling_interval: float) -> None:
    """Wait until the experiment ends; exit 0 when it COMPLETED, 1 otherwise (Determined's
    `det e wait`). A PAUSED experiment, or one no process runs any more, is said at once."""
    store = open_store()
    while True:
        exp = get_experiment(store, experiment_id)
        state = exp["state"]
        if state in TERMINAL_STATES:
            click.echo(f"experiment {experiment_id} {state}")
            ctx.exit(0 if state == ExperimentState.COMPLETED else EXIT_FAILED)
        if state == ExperimentState.PAUSED:
            resume = f"`det-lite experiment activate {experiment_id}` resumes it"
            raise BadInput(f"experiment {experiment_id} is PAUSED; {resume}")
        if exp["pid"] and not exp["running"]:
            raise Failed(
                f"experiment {experiment_id} is ACTIVE but no process runs it; "
                f"`det-lite experiment activate {experiment_id}` resumes it"
            )
        time.sleep(polling_interval)


@click.command("list-trials", short_help="List an experiment's trials.")
@click.argument("experiment_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (every column, whole).")
def list_trials(experiment_id: int, as_json: bool, as_csv: bool) -> None:
    """List the experiment's trials: state, hyperparameters (those that vary first), start and
    end, batches (Determined's `det e list-trials`, alias `lt`)."""
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    store = open_store()
    get_experiment(store, experiment_id)
    trials = store.trials.list(experiment_id)
    if as_json:
        echo_json(trials)
        return
    rows = [
        (
            t["id"],
            trial_display_state(t),
            hparams,
            format_time(t["started_at"] or t["created_at"]),
            format_time(t["ended_at"]),
            t["total_batches"],
        )
        for t, hparams in zip(trials, varying_first(trials))
    ]
    headers = ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    echo_rows(headers, rows, TRIALS_FIT, as_csv)


# --- name, description, labels --------------------------------------------------------------


@click.group("set", cls=AliasedGroup)
def set_attribute() -> None:
    """Set an experiment's description or name."""


@set_attribute.command("description", short_help="Set an experiment's description.")
@click.argument("experiment_id", type=int)
@click.argument("description")
def set_description(experiment_id: int, description: str) -> None:
    """Set the experiment's description (the config's `description`)."""
    open_store().experiments.set_annotations(experiment_id, description=description)
    click.echo(f"Set description of experiment {experiment_id} to '{description}'")


@set_attribute.command("name", short_help="Set an experiment's name.")
@click.argument("experiment_id", type=int)
@click.argument("name")
def set_name(experiment_id: int, name: str) -> None:
    """Set the experiment's name (`experiment list` shows it; the config's `name` too)."""
    if not name.strip():
        raise BadInput("an experiment's name must not be empty or blank")
    open_store().experiments.set_annotations(experiment_id, name=name)
    click.echo(f"Set name of experiment {experiment_id} to '{name}'")


@click.group("label", cls=AliasedGroup)
def label() -> None:
    """Add or remove an experiment's labels."""


def _labels(experiment_id: int) -> List[str]:
    found = open_store().experiments.annotations(experiment_id)
    if found is None:
        raise BadInput(f"experiment {experiment_id} not found")
    return list(found["labels"] or [])


@label.command("add", short_help="Add a label.")
@click.argument("experiment_id", type=int)
@click.argument("label_text", metavar="LABEL")
def add_label(experiment_id: int, label_text: str) -> None:
    """Add LABEL to the experiment (a label it has already: nothing changes)."""
    labels = _labels(experiment_id)
    open_store().experiments.set_annotations(experiment_id, labels=[*labels, label_text])
    click.echo(f"Added label '{label_text}' to experiment {experiment_id}")


@label.command("remove", short_help="Remove a label.")
@click.argument("experiment_id", type=int)
@click.argument("label_text", metavar="LABEL")
def remove_label(experiment_id: int, label_text: str) -> None:
    """Remove LABEL from the experiment (a label it does not have: nothing changes)."""
    labels = _labels(experiment_id)
    open_store().experiments.set_annotations(experiment_id, labels=[x for x in labels if x != label_text])
    click.echo(f"Removed label '{label_text}' from experiment {experiment_id}")


# --- fork -----------------------------------------------------------------------------------


@click.command("fork", short_help="Create an experiment from another's config and code.")
@click.argument("experiment_id", type=int)
@click.option(
    "--config",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a field of the config (dotted key, YAML value), e.g. --config hyperparameters.lr=0.1.",
)
@click.option(
    "--config-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Use this config instead of the experiment's (its code stays the experiment's).",
)
@click.option("--detach", is_flag=True, help="Run in the background and return the new id at once.")
@click.option("--test", "test_mode", is_flag=True, help="Run a short test of the trial instead.")
@click.pass_context
def fork(
    ctx: click.Context,
    experiment_id: int,
    overrides: Tuple[str, ...],
    config_file: Optional[str],
    detach: bool,
    test_mode: bool,
) -> None:
    """Create and run a new experiment from EXPERIMENT_ID's config (or --config-file) with the
    --config overrides, and EXPERIMENT_ID's code (its context snapshot), as Determined's web UI
    "Fork" does. In the foreground unless --detach, as `experiment create`."""
    import yaml

    from determined_lite.cli._experiment import exit_with, parse_overrides

    parsed = parse_overrides(overrides)
    store = open_store()
    parent = get_experiment(store, experiment_id)
    snapshot = context_snapshot_dir(experiment_id, store.home)
    if not os.path.isdir(snapshot):
        raise BadInput(f"experiment {experiment_id} has no code to fork (no context snapshot: {snapshot})")
    from determined_lite.experiment import create_experiment

    with tempfile.TemporaryDirectory(prefix="det-lite-fork-") as directory:
        path = config_file
        if path is None:
            path = os.path.join(directory, f"experiment-{experiment_id}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(parent["config"], f, sort_keys=False)
        click.echo(f"Forking experiment {experiment_id}")
        exit_with(ctx, lambda: create_experiment(path, snapshot, parsed, detach=detach, test=test_mode))


COMMANDS = [wait, list_trials, set_attribute, label, fork]
