"""The ``det-lite`` command line: Determined's verbs against the local store.

``det-lite experiment create|list|describe|logs|pause|activate|kill|delete``, ``experiment
wait|list-trials|set description|set name|label add|label remove|fork`` (``_experiment_more``),
``det-lite trial describe|logs|kill``, ``det-lite checkpoint list|describe|export|gc``,
``det-lite slot list``, ``det-lite tensorboard EXPERIMENT_ID``, ``det-lite run SCRIPT [ARGS]``
(a Determined script in local mode), ``det-lite ui`` (the web dashboard), ``det-lite server
list|stop`` (the warm fork servers); aliases ``e``, ``t``, ``c``, ``ls``, ``lt``, ``dashboard``.
Determined's other common commands (``agent``, ``task``, ``notebook``, ``e continue``, ...) each
print one line saying what to use instead (``_pointers``).
Exit codes: 0 success, 1 the experiment or a trial failed, 2 bad input; errors are one line,
``det-lite: error: ...`` (``_common.show_error``). Read-only commands
import only click and the standard library (never torch).
"""

from __future__ import annotations

import atexit
import gc
from typing import Optional, Sequence

import click

from determined_lite import __version__
from determined_lite.cli._checkpoint import checkpoint
from determined_lite.cli._common import CommandLine
from determined_lite.cli._experiment import experiment
from determined_lite.cli._experiment_more import COMMANDS as EXPERIMENT_MORE
from determined_lite.cli._pointers import CHECKPOINT as CHECKPOINT_POINTERS
from determined_lite.cli._pointers import EXPERIMENT as EXPERIMENT_POINTERS
from determined_lite.cli._pointers import TOP_LEVEL as TOP_LEVEL_POINTERS
from determined_lite.cli._run import run
from determined_lite.cli._server import server
from determined_lite.cli._slot import slot
from determined_lite.cli._tensorboard import tensorboard
from determined_lite.cli._trial import trial
from determined_lite.cli._ui import ui


@click.group(
    "det-lite",
    cls=CommandLine,
    aliases={"e": "experiment", "t": "trial", "c": "checkpoint", "dashboard": "ui"},
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="det-lite")
def cli() -> None:
    """Determined-style experiments on this machine (state in $DET_LITE_HOME, default ~/.det-lite)."""


cli.add_command(experiment)
cli.add_command(trial)
cli.add_command(checkpoint)
cli.add_command(tensorboard)
cli.add_command(run)
cli.add_command(ui)
cli.add_command(server)
cli.add_command(slot)
for _command in EXPERIMENT_MORE + EXPERIMENT_POINTERS:
    experiment.add_command(_command)
for _command in CHECKPOINT_POINTERS:
    checkpoint.add_command(_command)
for _command in TOP_LEVEL_POINTERS:
    cli.add_command(_command)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point (``det-lite``); exits with the command's code.

    An exit handler, run after every one the command registers, moves every live object into
    the collector's permanent generation: the interpreter's final collections then skip them,
    which took ~0.1 s of every command's end once an experiment's modules are loaded (measured;
    15 ms frozen). Module teardown and the exit handlers (logging's flush, temporary
    directories) run as before. ``det-lite run``, which runs the user's script in this process,
    takes the handler off: the script's reference cycles are collected at exit, as under
    python3."""
    atexit.register(gc.freeze)  # after every exit handler the command registers (reverse order)
    cli.main(args=list(argv) if argv is not None else None, prog_name="det-lite")


__all__ = ["cli", "main"]
