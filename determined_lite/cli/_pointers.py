"""Determined commands det-lite has no use for (a cluster's: agents, tasks, users, notebooks,
...) or gives under another name: each is a hidden command that prints one line saying what to
use instead and exits 2, whatever its arguments. ``cli/__init__.py`` adds :data:`TOP_LEVEL`
to the root group and :data:`EXPERIMENT` / :data:`CHECKPOINT` to theirs."""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn

import click

from determined_lite.cli._common import BadInput

_NO_CLUSTER = "det-lite runs on this machine, without a master"
_LABEL_ADD = "`det-lite experiment label add ID LABEL`"
_LABELS = f"det-lite has no projects or workspaces: experiments carry labels ({_LABEL_ADD})"
_NO_ARCHIVE = "det-lite does not archive experiments"

_TOP: Dict[str, str] = {
    "agent": f"{_NO_CLUSTER} or agents; `det-lite slot list` shows the slots trials get",
    "task": f"{_NO_CLUSTER}; `det-lite experiment list` and `det-lite trial describe ID` show what runs",
    "command": f"{_NO_CLUSTER}: run the command in a shell",
    "cmd": f"{_NO_CLUSTER}: run the command in a shell",
    "notebook": f"{_NO_CLUSTER}: start Jupyter yourself; the SDK "
    "(`from determined.experimental import client`) works in it",
    "shell": f"{_NO_CLUSTER}: use a terminal on this machine",
    "user": f"{_NO_CLUSTER} or users; the store is $DET_LITE_HOME",
    "user-group": f"{_NO_CLUSTER} or users",
    "rbac": f"{_NO_CLUSTER} or users",
    "token": f"{_NO_CLUSTER} or users",
    "auth": f"{_NO_CLUSTER} or users",
    "sso": f"{_NO_CLUSTER} or users",
    "oauth": f"{_NO_CLUSTER} or users",
    "master": f"{_NO_CLUSTER}; its state is the store in $DET_LITE_HOME (`det-lite ui` shows it)",
    "job": f"{_NO_CLUSTER} or job queue; `det-lite experiment list` shows what runs",
    "template": "det-lite has no config templates: merge the fields into the experiment's YAML or use "
    "--config KEY=VALUE",
    "deploy": f"{_NO_CLUSTER}: nothing to deploy (pip install det-lite is all)",
    "project": _LABELS,
    "workspace": _LABELS,
    "resource-pool": f"{_NO_CLUSTER} or resource pools; `det-lite slot list` shows the slots",
    "rp": f"{_NO_CLUSTER} or resource pools; `det-lite slot list` shows the slots",
    "resources": f"{_NO_CLUSTER}; `det-lite slot list` shows the slots",
    "config-policies": "det-lite has no config policies: the experiment's YAML is the whole config",
    "model": "the model registry is in the Python SDK: `client.create_model`, `client.list_models` "
    "(docs/migrating-from-determined.md)",
    "version": "`det-lite --version`",
    "dev": f"{_NO_CLUSTER}",
}

_EXPERIMENT: Dict[str, str] = {
    "continue": "`det-lite experiment activate ID` resumes a paused or interrupted experiment; "
    "`det-lite experiment fork ID --config ...` starts a new one from its config",
    "archive": f"{_NO_ARCHIVE}: label them (`det-lite experiment label add ID archived`)",
    "unarchive": f"{_NO_ARCHIVE} (`det-lite experiment label remove ID archived`)",
    "cancel": "`det-lite experiment kill ID`",
    "config": "`det-lite experiment describe ID --json` (its `config`)",
    "download": "`det-lite checkpoint list --experiment ID`, then `det-lite checkpoint download UUID`",
    "download-model-def": "the SDK's `client.get_experiment(ID).download_code()`; the code is in "
    "$DET_LITE_HOME/experiments/ID/context",
    "list-checkpoints": "`det-lite checkpoint list --experiment ID`",
    "lc": "`det-lite checkpoint list --experiment ID`",
    "move": _LABELS,
    "delete-tb-files": "`det-lite experiment delete ID` removes an experiment with its TensorBoard files",
}

_CHECKPOINT: Dict[str, str] = {
    "delete": "the SDK's `client.get_checkpoint(UUID).delete()`; `det-lite checkpoint gc` removes orphans",
    "rm": "`det-lite checkpoint gc` removes orphaned checkpoints; the retention policy keeps the rest",
}


def _pointer(group: str, name: str, instead: str) -> click.Command:
    """A hidden command ``name`` that says ``det {group} {name}``'s det-lite counterpart."""
    what = f"det {group} {name}".replace("  ", " ").strip()

    def callback(**_: Any) -> NoReturn:
        raise BadInput(f"`{what}` is not in det-lite: {instead}")

    return click.Command(
        name,
        callback=callback,
        hidden=True,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help=f"Not in det-lite: {instead}",
    )


def pointers(group: str, table: Dict[str, str]) -> List[click.Command]:
    return [_pointer(group, name, instead) for name, instead in table.items()]


TOP_LEVEL = pointers("", _TOP)
EXPERIMENT = pointers("experiment", _EXPERIMENT)
CHECKPOINT = pointers("checkpoint", _CHECKPOINT)
