"""``det-lite tensorboard EXPERIMENT_ID...``: TensorBoard on one or several experiments' event files.

TensorBoard runs in this process (``tensorboard.serving.serve``, also the dashboard's TensorBoard
button), so the URL is printed once the port is bound: a taken port gives way to the next free
one (up to ten above it, then any). With
several experiments, runs are named ``experiment_<id>/trial_<id>``. Every trial directory is a
session of the HParams plugin (``TorchWriter.add_hparams_session``): its table and parallel
coordinates compare the trials by hyperparameters and metrics.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from typing import Tuple

import click

from determined_lite.cli._common import echo_json, get_experiment, open_store, warn
from determined_lite.store import tensorboard_dir
from determined_lite.tensorboard.serving import logdir_arguments, serve, tensorboard_command

DEFAULT_PORT = 6006
DEFAULT_HOST = "127.0.0.1"  # loopback unless told otherwise

@click.command("tensorboard", short_help="Start TensorBoard on experiments.")
@click.argument("experiment_ids", metavar="EXPERIMENT_ID...", type=int, nargs=-1, required=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to serve on; when taken, the next free one (0: any free port).",
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--no-launch", is_flag=True, help="Print the command instead of running it.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --no-launch: print {logdir, command} as JSON (several experiments: logdir by name).",
)
def tensorboard(
    experiment_ids: Tuple[int, ...], port: int, host: str, no_launch: bool, as_json: bool
) -> None:
    """Start TensorBoard on the trials of EXPERIMENT_ID... (stop it with Ctrl-C).

    Its HParams tab compares the trials: one row per trial, its hyperparameters and metrics.
    """
    store = open_store()
    ids = list(dict.fromkeys(experiment_ids))
    for experiment_id in ids:
        get_experiment(store, experiment_id)
    logdirs = [(eid, tensorboard_dir(eid, store.home)) for eid in ids]
    arguments = logdir_arguments(logdirs)
    if no_launch:
        command = tensorboard_command(arguments, port, host)
        if as_json:
            logdir = logdirs[0][1] if len(ids) == 1 else {f"experiment_{eid}": path for eid, path in logdirs}
            echo_json({"logdir": logdir, "command": command})
        else:
            click.echo(shlex.join(command))
        return
    for eid, path in logdirs:
        if not os.path.isdir(path):
            warn(f"experiment {eid} has no TensorBoard files yet ({path})")
    url = serve(arguments, port, host)
    which = ", ".join(str(i) for i in ids)
    click.echo(f"TensorBoard for experiment{'s' if len(ids) > 1 else ''} {which} at {url} (Ctrl-C to stop)")
    # Ctrl-C and SIGTERM stop the server (exit 0), also when a shell started this process with
    # SIGINT ignored, as it does for a background job: the server only reads, nothing to save.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return
