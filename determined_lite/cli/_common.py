"""Shared CLI pieces: command groups with aliases, error mapping to exit codes, tables, JSON.

Exit codes: 0 success, 1 the experiment or a trial failed (or the store is unusable),
2 bad input (arguments, config, unknown id, a request the current state does not allow).
Nothing here imports torch: read-only commands must start fast.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Dict, Iterable, List, Optional, Sequence

import click

from determined_lite.experiment import EXIT_BAD_INPUT, EXIT_FAILED
from determined_lite.store import ExperimentKind, ExperimentState, NotFoundError, Store, StoreError


class BadInput(click.ClickException):
    """An error in what the user asked for: printed as ``Error: ...`` on stderr, exit 2."""

    exit_code = EXIT_BAD_INPUT


class Failed(click.ClickException):
    """Something the user asked for could not be done: ``Error: ...`` on stderr, exit 1."""

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


def open_store() -> Store:
    """The store under ``$DET_LITE_HOME`` (created on first use)."""
    return Store()


def get_experiment(store: Store, experiment_id: int) -> Dict[str, Any]:
    exp = store.get_experiment(experiment_id)
    if exp is None:
        raise BadInput(f"experiment {experiment_id} not found")
    return exp


def get_trial(store: Store, trial_id: int) -> Dict[str, Any]:
    trial = store.get_trial(trial_id)
    if trial is None:
        raise BadInput(f"trial {trial_id} not found")
    return trial


def experiment_finished(store: Store, experiment_id: int) -> bool:
    """Whether the experiment has stopped running: gone, no longer ACTIVE, or its process died
    (``logs --follow`` stops then)."""
    exp = store.get_experiment(experiment_id)
    return exp is None or exp["state"] != ExperimentState.ACTIVE or (bool(exp["pid"]) and not exp["running"])


# --- output ---------------------------------------------------------------------------------


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats (NaN, ±inf) as ``null``, so the output is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


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
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def format_mapping(mapping: Optional[Dict[str, Any]]) -> str:
    """``{"loss": 0.25, "acc": 1}`` → ``acc=1 loss=0.25`` (sorted keys)."""
    if not mapping:
        return ""
    return " ".join(f"{k}={format_value(mapping[k])}" for k in sorted(mapping))


def display_name(exp: Dict[str, Any]) -> str:
    """The experiment's name; ``(local)`` after a plain-Python ``Trainer.fit`` run's."""
    name = exp.get("name") or ""
    return f"{name} (local)" if exp.get("kind") == ExperimentKind.LOCAL else name


def display_state(exp: Dict[str, Any]) -> str:
    """The state, with a pending request or a dead process noted (``ACTIVE (kill requested)``)."""
    state = exp["state"]
    if state == ExperimentState.ACTIVE and exp.get("requested_action"):
        return f"{state} ({exp['requested_action']} requested)"
    if state == ExperimentState.ACTIVE and exp.get("pid") and not exp.get("running"):
        return f"{state} (not running)"
    return state


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table: `` a | b`` header, ``---+---`` rule, numbers right-aligned."""
    rows = [list(row) for row in rows]
    cells = [[c if isinstance(c, str) else format_value(c) for c in row] for row in rows]
    numeric = [
        bool(rows) and all(_is_number(row[i]) for row in rows if row[i] is not None)
        for i in range(len(headers))
    ]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(values: Sequence[str], right: Sequence[bool]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return " " + " | ".join(parts).rstrip()

    out = [line(headers, [False] * len(headers)), "-" + "-+-".join("-" * w for w in widths) + "-"]
    out.extend(line(row, numeric) for row in cells)
    return "\n".join(out)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    click.echo(render_table(headers, rows))
