"""``det-lite tensorboard EXPERIMENT_ID``: TensorBoard on an experiment's event files."""

from __future__ import annotations

import os
import shlex
import sys
from typing import List

import click

from determined_lite.cli._common import echo_json, get_experiment, open_store
from determined_lite.store import tensorboard_dir


def tensorboard_command(logdir: str, port: int, host: str) -> List[str]:
    """The TensorBoard command line, run with this interpreter."""
    return [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", str(port), "--host", host]


@click.command("tensorboard", short_help="Start TensorBoard on an experiment.")
@click.argument("experiment_id", type=int)
@click.option("--port", type=click.IntRange(1, 65535), default=6006, show_default=True)
@click.option("--host", default="localhost", show_default=True, help="Address to bind.")
@click.option("--no-launch", is_flag=True, help="Print the command instead of running it.")
@click.option("--json", "as_json", is_flag=True, help="With --no-launch: print {logdir, command} as JSON.")
@click.pass_context
def tensorboard(
    ctx: click.Context, experiment_id: int, port: int, host: str, no_launch: bool, as_json: bool
) -> None:
    """Start TensorBoard on EXPERIMENT_ID's trials (stop it with Ctrl-C)."""
    import subprocess

    store = open_store()
    get_experiment(store, experiment_id)
    logdir = tensorboard_dir(experiment_id, store.home)
    command = tensorboard_command(logdir, port, host)
    if no_launch:
        if as_json:
            echo_json({"logdir": logdir, "command": command})
        else:
            click.echo(shlex.join(command))
        return
    if not os.path.isdir(logdir):
        click.echo(f"Note: experiment {experiment_id} has no TensorBoard files yet ({logdir}).", err=True)
    click.echo(f"TensorBoard for experiment {experiment_id}: http://{host}:{port}/", err=True)
    child = subprocess.Popen(command)
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        code = 0
    ctx.exit(code)
