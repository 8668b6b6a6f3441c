"""``det-lite trial ...`` (alias ``t``): describe a trial, print its logs, kill it."""

from __future__ import annotations

from typing import Optional

import click

from determined_lite.cli._common import (
    AliasedGroup,
    BadInput,
    echo_json,
    experiment_finished,
    get_trial,
    open_store,
)
from determined_lite.cli._describe import (
    check_output_options,
    emit_workloads,
    output_options,
    trials_table,
)
from determined_lite.cli._logs import print_logs
from determined_lite.store import NotFoundError, TrialState


@click.group("trial", cls=AliasedGroup)
def trial() -> None:
    """Inspect trials."""


@trial.command("describe", short_help="Show a trial's metrics and checkpoints.")
@click.argument("trial_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
@output_options
def describe(
    trial_id: int, as_json: bool, metrics: bool, as_csv: bool, outdir: Optional[str], all_workloads: bool
) -> None:
    """Show a trial: hyperparameters, progress, metrics and checkpoints."""
    check_output_options(as_json, as_csv, outdir)
    store = open_store()
    found = store.trials.describe(trial_id, metrics=as_json)
    if found is None:
        raise BadInput(f"trial {trial_id} not found")
    if as_json:
        echo_json(found)
        return
    table = trials_table([found])
    table.title = f"Trial {trial_id} of experiment {found['experiment_id']}"
    emit_workloads(store, [table], [found], (metrics, all_workloads, as_csv, outdir))


@trial.command("kill", short_help="Kill one trial; the search goes on.")
@click.argument("trial_id", type=int)
def kill(trial_id: int) -> None:
    """Kill TRIAL_ID alone, as Determined's `det trial kill`: its experiment's runner stops it
    (it ends CANCELED) and the search goes on with the other trials."""
    store = open_store()
    try:
        asked = store.requests.kill_trial(trial_id)
    except NotFoundError:
        raise BadInput(f"trial {trial_id} not found") from None
    if not asked:
        found = store.trials.get(trial_id) or {}
        click.echo(f"Trial {trial_id} already ended ({found.get('state')}); nothing to kill.")
        return
    click.echo(f"Killed trial {trial_id}")


@trial.command("logs", short_help="Print a trial's logs.")
@click.argument("trial_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the trial stops.")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with its UTC time.")
def logs(trial_id: int, follow: bool, tail: int, timestamps: bool) -> None:
    """Print the trial's log lines (all its workers; `[rank N]` when there are several)."""
    store = open_store()
    get_trial(store, trial_id)

    def finished() -> bool:
        found = store.trials.get(trial_id)
        return (
            found is None
            or found["state"] != TrialState.ACTIVE
            or experiment_finished(store, found["experiment_id"])
        )

    print_logs(
        lambda **kw: store.logs.list(trial_id=trial_id, **kw),
        tail,
        follow,
        finished,
        with_trial=False,
        timestamps=timestamps,
    )
