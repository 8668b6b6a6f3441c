"""``det-lite checkpoint ...`` (alias ``c``): list checkpoints, describe one, export (download)
one, gc."""

from __future__ import annotations

import os
from typing import Optional

import click

from determined_lite.cli._common import (
    AliasedGroup,
    BadInput,
    Failed,
    echo_json,
    format_mapping,
    format_time,
    get_checkpoint,
    get_experiment,
    get_trial,
    open_store,
    warn,
)
from determined_lite.cli._table import Cut, Fit, echo_rows
from determined_lite.storage import read_metadata_file
from determined_lite.store import Store

LIST_FIT = Fit(
    cut={"Path": Cut.START, "UUID": Cut.END, "Validation Metrics": Cut.ITEMS},
    drop=("Path", "Time", "Experiment ID", "State"),
)


@click.group("checkpoint", cls=AliasedGroup, aliases={"ls": "list", "download": "export"})
def checkpoint() -> None:
    """List and export checkpoints."""


@checkpoint.command("list", short_help="List checkpoints.")
@click.option("--experiment", "experiment_id", type=int, default=None, help="Only this experiment's.")
@click.option("--trial", "trial_id", type=int, default=None, help="Only this trial's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (every column, whole).")
def list_checkpoints(
    experiment_id: Optional[int], trial_id: Optional[int], as_json: bool, as_csv: bool
) -> None:
    """List checkpoints (all, or one experiment's, or one trial's), by trial and batch."""
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    if experiment_id is not None and trial_id is not None:
        raise click.UsageError("give --experiment or --trial, not both")
    store = open_store()
    if experiment_id is not None:
        get_experiment(store, experiment_id)
    if trial_id is not None:
        get_trial(store, trial_id)
    found = store.checkpoints.list(experiment_id=experiment_id, trial_id=trial_id)
    if as_json:
        echo_json(found)
        return
    echo_rows(
        ["UUID", "Experiment ID", "Trial ID", "# of Batches", "State", "Validation Metrics", "Time", "Path"],
        [
            (
                c["uuid"],
                c["experiment_id"],
                c["trial_id"],
                c["total_batches"],
                c["state"],
                c["metrics"] if as_csv else format_mapping(c["metrics"]),
                format_time(c["created_at"]),
                c["path"],
            )
            for c in found
        ],
        LIST_FIT,
        as_csv,
    )


@checkpoint.command("export", short_help="Copy a checkpoint directory (download).")
@click.argument("uuid")
@click.argument("dest", required=False, type=click.Path(file_okay=False, writable=True))
@click.option(
    "-o",
    "--output-dir",
    "output_dir",
    type=click.Path(file_okay=False, writable=True),
    default=None,
    help="Where to copy it (Determined's `checkpoint download -o DIR`); the same as DEST.",
)
def export(uuid: str, dest: Optional[str], output_dir: Optional[str]) -> None:
    """Copy checkpoint UUID's directory to DEST (created; an existing DEST must be empty);
    without DEST, to checkpoints/<uuid> under the current directory, as Determined does.

    UUID may be a unique prefix of at least 4 characters (as the tables show: the first 8).
    Determined calls this `checkpoint download UUID -o DIR`; that form works too.
    """
    if dest is not None and output_dir is not None and dest != output_dir:
        raise click.UsageError("give the destination once: DEST or -o/--output-dir")
    _copy_checkpoint(open_store(), uuid, dest if dest is not None else output_dir)


def _copy_as_users(source: str, target: str) -> None:
    """Copy a checkpoint so it stands alone (its linked code/ as files, links inside it as
    links) as new files of the user's: never the checkpoint's private modes (files and
    directories get the user's umask, as any copy)."""
    from determined_lite.storage import copy_checkpoint

    copy_checkpoint(source, target)
    mask = os.umask(0)
    os.umask(mask)
    for directory, _, files in os.walk(target):
        os.chmod(directory, 0o777 & ~mask)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


def _copy_checkpoint(store: Store, uuid: str, dest: Optional[str]) -> None:
    """Copy a checkpoint's directory next to ``dest`` (default ``checkpoints/<uuid>``), then
    rename it there."""
    import shutil
    import tempfile

    found = get_checkpoint(store, uuid)
    uuid = found["uuid"]
    dest = dest if dest is not None else os.path.join("checkpoints", uuid)
    from determined_lite.storage import StorageError, fetch_checkpoint

    try:
        source = fetch_checkpoint(store, found)
    except (StorageError, FileNotFoundError) as e:
        raise Failed(f"checkpoint {uuid}: {e}") from None
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
        _copy_as_users(source, os.path.join(staging, "c"))
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


@checkpoint.command("describe", short_help="Show a checkpoint.")
@click.argument("uuid")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (non-finite numbers as null).")
def describe(uuid: str, as_json: bool) -> None:
    """Show checkpoint UUID (or a unique prefix of it): its experiment, trial, batch, time,
    validation metrics, metadata (the SDK's, else its metadata.json), model versions and path."""
    store = open_store()
    found = get_checkpoint(store, uuid)
    metadata = store.checkpoints.metadata(found["uuid"])
    if metadata is None:
        metadata = read_metadata_file(found["path"]) or {}
    registered = store.checkpoints.registered(found["experiment_id"]).get(found["uuid"])
    shown = {
        "Checkpoint UUID": found["uuid"],
        "Experiment ID": found["experiment_id"],
        "Trial ID": found["trial_id"],
        "Steps Completed": found["total_batches"],
        "State": found["state"],
        "Report Time": format_time(found["created_at"]),
        "Validation Metrics": found["metrics"] or {},
        "Metadata": metadata,
        "Model Versions": registered or "",
        "Path": found["path"],
    }
    if as_json:
        echo_json({**found, "metadata": metadata, "model_versions": registered})
        return
    # Nested metadata (the experiment config a metadata.json holds) is "{...}": --json has it.
    shown["Metadata"] = {k: "{...}" if isinstance(v, (dict, list)) else v for k, v in metadata.items()}
    width = max(len(k) for k in shown)
    for key, value in shown.items():
        text = format_mapping(value) if isinstance(value, dict) else str(value)
        click.echo(f"{key + ':':<{width + 1}} {text}")


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
