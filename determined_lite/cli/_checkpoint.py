"""``det-lite checkpoint ...`` (alias ``c``): list checkpoints, export (download) one, gc."""

from __future__ import annotations

import os
from typing import Optional

import click

from determined_lite.cli._common import (
    AliasedGroup,
    BadInput,
    Failed,
    echo_json,
    echo_table,
    format_mapping,
    format_time,
    get_checkpoint,
    get_experiment,
    get_trial,
    open_store,
    warn,
)


@click.group("checkpoint", cls=AliasedGroup, aliases={"ls": "list", "download": "export"})
def checkpoint() -> None:
    """List and export checkpoints."""


@checkpoint.command("list", short_help="List checkpoints.")
@click.option("--experiment", "experiment_id", type=int, default=None, help="Only this experiment's.")
@click.option("--trial", "trial_id", type=int, default=None, help="Only this trial's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
def list_checkpoints(experiment_id: Optional[int], trial_id: Optional[int], as_json: bool) -> None:
    """List checkpoints (all, or one experiment's, or one trial's), by trial and batch."""
    if experiment_id is not None and trial_id is not None:
        raise click.UsageError("give --experiment or --trial, not both")
    store = open_store()
    if experiment_id is not None:
        get_experiment(store, experiment_id)
    if trial_id is not None:
        get_trial(store, trial_id)
    found = store.list_checkpoints(experiment_id=experiment_id, trial_id=trial_id)
    if as_json:
        echo_json(found)
        return
    echo_table(
        ["UUID", "Experiment ID", "Trial ID", "# of Batches", "State", "Validation Metrics", "Time", "Path"],
        [
            (
                c["uuid"],
                c["experiment_id"],
                c["trial_id"],
                c["total_batches"],
                c["state"],
                format_mapping(c["metrics"]),
                format_time(c["created_at"]),
                c["path"],
            )
            for c in found
        ],
    )


@checkpoint.command("export", short_help="Copy a checkpoint directory (download).")
@click.argument("uuid")
@click.argument("dest", type=click.Path(file_okay=False, writable=True))
def export(uuid: str, dest: str) -> None:
    """Copy checkpoint UUID's directory to DEST (created; an existing DEST must be empty).

    UUID may be a unique prefix of at least 4 characters (as the tables show: the first 8).
    Determined calls this `checkpoint download`; that name works too.
    """
    import shutil
    import tempfile

    from determined_lite.storage import copy_checkpoint

    store = open_store()
    found = get_checkpoint(store, uuid)
    uuid = found["uuid"]
    source = found["path"]
    if not os.path.isdir(source):
        raise Failed(f"checkpoint {uuid}'s directory {source} is missing")
    dest = os.path.abspath(dest)
    if os.path.exists(dest):
        if not os.path.isdir(dest) or os.listdir(dest):
            raise BadInput(f"{dest} exists and is not an empty directory")
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    # Copy next to DEST, then rename: DEST never holds a partial checkpoint.
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.tmp-", dir=parent)
    try:
        copy_checkpoint(source, os.path.join(staging, "c"))  # code/ it links to copied as files
        if os.path.isdir(dest):
            os.rmdir(dest)
        os.replace(os.path.join(staging, "c"), dest)
    except OSError as e:
        raise Failed(f"could not copy checkpoint {uuid} to {dest}: {e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(
        f"Exported checkpoint {uuid} (trial {found['trial_id']}, batch {found['total_batches']}) to {dest}"
    )


@checkpoint.command("gc", short_help="Remove orphaned checkpoints and files of deleted experiments.")
@click.option("--dry-run", is_flag=True, help="Only print what would be done.")
def gc(dry_run: bool) -> None:
    """Reconcile checkpoint directories with the store.

    Removes `.tmp-*` directories whose writer is gone, checkpoints never registered whose
    trial does not need them (a trial that may still train gets its newest one registered),
    and checkpoints, run directories and TensorBoard files of deleted experiments; forgets
    registered checkpoints whose directory is gone. Only checkpoints whose metadata.json names
    an experiment of this store are touched, never while that experiment runs.
    """
    from determined_lite.experiment._gc import collect_garbage

    report = collect_garbage(open_store(), dry_run=dry_run)
    for line in report.lines():
        click.echo(line)
    for problem in report.problems:
        warn(problem)
    click.echo(report.summary())
    if report.problems:
        raise Failed("some directories could not be removed or registered")
