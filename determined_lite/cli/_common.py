"""Shared CLI pieces: command groups with aliases, error mapping to exit codes, tables, JSON.

Exit codes: 0 success, 1 the experiment or a trial failed (or the store is unusable),
2 bad input (arguments, config, unknown id, a request the current state does not allow).
Nothing here imports torch: read-only commands must start fast.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import IO, Any, Dict, List, Optional, Sequence

import click

from determined_lite._errors import error_line, warning_line
from determined_lite.experiment import EXIT_BAD_INPUT, EXIT_FAILED
from determined_lite.store import (
    ExperimentKind,
    ExperimentState,
    NotFoundError,
    Store,
    StoreError,
    experiment_display_state,
    json_safe,
)


def show_error(error: click.ClickException) -> None:
    """The one way the CLI prints an error: the usage and help hint for a usage error, then
    ``det-lite: error: <message>`` on stderr."""
    if isinstance(error, click.UsageError) and error.ctx is not None:
        ctx = error.ctx
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            hint = f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", err=True)
    click.echo(error_line(error.format_message()), err=True)


def warn(message: str) -> None:
    """``det-lite: warning: <message>`` on stderr."""
    click.echo(warning_line(message), err=True)


class _CliError(click.ClickException):
    def show(self, file: Optional[IO[Any]] = None) -> None:
        show_error(self)


class BadInput(_CliError):
    """An error in what the user asked for: ``det-lite: error: ...`` on stderr, exit 2."""

    exit_code = EXIT_BAD_INPUT


class Failed(_CliError):
    """Something the user asked for could not be done: ``det-lite: error: ...``, exit 1."""

    exit_code = EXIT_FAILED


class AliasedGroup(click.Group):
    """A click group that accepts short aliases (``e`` for ``experiment``) and maps store errors
    to exit codes: unknown ids are bad input (2), an unusable store is a failure (1)."""

    def __init__(self, *args: Any, aliases: Optional[Dict[str, str]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = dict(aliases or {})

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(self, ctx: click.Context, args: List[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        return (cmd.name if cmd is not None else name), cmd, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NotFoundError as e:
            raise BadInput(str(e)) from None
        except StoreError as e:
            raise Failed(str(e)) from None


class CommandLine(AliasedGroup):
    """The root ``det-lite`` group: every error, click's own usage errors included, is printed by
    ``show_error`` (``det-lite: error: ...``) with its exit code."""

    def main(
        self,
        args: Optional[Sequence[str]] = None,
        prog_name: Optional[str] = None,
        complete_var: Optional[str] = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            show_error(e)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(EXIT_FAILED)
        sys.exit(code if isinstance(code, int) else 0)


def open_store() -> Store:
    """The store under ``$DET_LITE_HOME`` (created on first use)."""
    return Store()


def get_experiment(store: Store, experiment_id: int) -> Dict[str, Any]:
    exp = store.experiments.get(experiment_id)
    if exp is None:
        raise BadInput(f"experiment {experiment_id} not found")
    return exp


def get_trial(store: Store, trial_id: int) -> Dict[str, Any]:
    trial = store.trials.get(trial_id)
    if trial is None:
        raise BadInput(f"trial {trial_id} not found")
    return trial


MIN_UUID_PREFIX = 4
MAX_CANDIDATES = 10


def get_checkpoint(store: Store, name: str) -> Dict[str, Any]:
    """The checkpoint named by its uuid or a unique prefix of it (at least 4 characters);
    ambiguous or unknown names are bad input, the candidates listed."""
    found = store.checkpoints.get(name)
    if found is not None:
        return found
    if len(name) < MIN_UUID_PREFIX:
        needs = f"a uuid prefix needs at least {MIN_UUID_PREFIX} characters"
        raise BadInput(f"checkpoint {name} not found ({needs})")
    matches = store.checkpoints.by_prefix(name)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise BadInput(f"checkpoint {name} not found")
    shown = "; ".join(
        f"{c['uuid']} (experiment {c['experiment_id']}, trial {c['trial_id']}, batch {c['total_batches']})"
        for c in matches[:MAX_CANDIDATES]
    )
    more = f"; and {len(matches) - MAX_CANDIDATES} more" if len(matches) > MAX_CANDIDATES else ""
    raise BadInput(f"checkpoint prefix {name} is ambiguous: {len(matches)} checkpoints match: {shown}{more}")


def experiment_finished(store: Store, experiment_id: int) -> bool:
    """Whether the experiment has stopped running: gone, no longer ACTIVE, or its process died
    (``logs --follow`` stops then)."""
    exp = store.experiments.get(experiment_id)
    return exp is None or exp["state"] != ExperimentState.ACTIVE or (bool(exp["pid"]) and not exp["running"])


# --- output ---------------------------------------------------------------------------------


def echo_json(value: Any) -> None:
    """Print ``value`` as indented strict JSON (see ``json_safe``)."""
    click.echo(json.dumps(json_safe(value), indent=2, allow_nan=False))


def format_time(ts: Optional[float]) -> str:
    """Local time ``YYYY-MM-DD HH:MM:SS``; empty for None."""
    if ts is None:
        return ""
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def format_value(value: Any) -> str:
    """A metric or hyperparameter value, compact: floats to 6 significant digits."""
    kind = type(value)
    if kind is float:  # the common cases first: tables format thousands of them
        return f"{value:.6g}"
    if kind is int or kind is str:
        return str(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list) and (len(value) > MAX_LIST_SHOWN or any(isinstance(v, list) for v in value)):
        return _shape(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


MAX_LIST_SHOWN = 4


def _shape(value: Any) -> str:
    """A long or nested list (a confusion matrix) as its shape, ``[10x10]``: tables show it;
    ``--json`` and ``--csv`` hold the values."""
    dims = []
    while isinstance(value, list):
        dims.append(str(len(value)))
        value = value[0] if value else None
    return "[" + "x".join(dims) + "]"


def format_mapping(mapping: Optional[Dict[str, Any]]) -> str:
    """``{"loss": 0.25, "acc": 1}`` → ``acc=1 loss=0.25`` (sorted keys)."""
    if not mapping:
        return ""
    return " ".join(f"{k}={format_value(mapping[k])}" for k in sorted(mapping))


def display_name(exp: Dict[str, Any]) -> str:
    """The experiment's name; ``(local)`` after a plain-Python ``Trainer.fit`` run's,
    ``(unmanaged)`` after a Core API script's ``core_v2.init()`` outside det-lite."""
    name = exp.get("name") or ""
    kind = exp.get("kind")
    return f"{name} ({kind})" if kind in (ExperimentKind.LOCAL, ExperimentKind.UNMANAGED) else name


def display_state(exp: Dict[str, Any]) -> str:
    """The state, with a pending request or a dead process noted (``ACTIVE (kill requested)``)."""
    return experiment_display_state(exp)
