"""``det-lite run SCRIPT [ARGS]...``: a Determined script on this machine, without an experiment.

Determined's local mode: the script runs in this process, from the current directory, as
``python3 SCRIPT ARGS`` would run it (``-m MODULE`` as ``python3 -m MODULE``), with det-lite's
``determined`` alias importable (never over a real Determined installation) and no cluster
info (``det.get_cluster_info()`` is None), so ``det.pytorch.init(hparams=..., exp_conf=...)``
and ``det.core.init()`` take their local forms. The exit status is the script's.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import os
import sys
from typing import Optional, Tuple

import click

from determined_lite.cli._common import BadInput


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-m", "module", metavar="MODULE", help="Run a module as 'python3 -m MODULE' would.")
@click.argument("script_and_args", nargs=-1, type=click.UNPROCESSED)
def run(module: Optional[str], script_and_args: Tuple[str, ...]) -> None:
    """Run a Determined script locally: det-lite run train.py [ARGS]..."""
    from determined_lite.compat import install_alias
    from determined_lite.config._launcher import ScriptCommand
    from determined_lite.launch._script import ScriptExit, run_as_main
    from determined_lite.runtime._cluster import SPEC_ENV

    if module is None and not script_and_args:
        raise click.UsageError("det-lite run needs a script (det-lite run train.py [ARGS]) or -m MODULE")
    if module is not None:
        _check_module(module)
        script = ScriptCommand(None, module, tuple(script_and_args))
    else:
        path, *args = script_and_args
        if not os.path.isfile(path):
            raise BadInput(f"no script {path!r} in {os.getcwd()}")
        script = ScriptCommand(path, None, tuple(args))
    os.environ.pop(SPEC_ENV, None)  # a local run: no cluster info, also in its subprocesses
    # The script's reference cycles are collected at exit, their finalizers run, as under
    # python3: det-lite's own commands freeze the collector at exit instead (``cli.main``).
    atexit.unregister(gc.freeze)
    install_alias()
    try:
        run_as_main(script, os.getcwd())
    except ScriptExit as e:
        code = e.code
        sys.exit(code if isinstance(code, int) else 1)


def _check_module(module: str) -> None:
    """A module that cannot be found from the current directory is one line (as a missing
    script is), not runpy's traceback; errors raised while the module runs stay the script's."""
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.pop(0)
    if not found:
        raise BadInput(f"no module {module!r} importable from {os.getcwd()}")
