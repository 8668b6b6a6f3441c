"""``det-lite server list|stop``: this user's warm fork servers (``launch/_server_registry.py``).

A fork server starts 1-slot trials from a process that imported torch already: at most one runs
per user and det-lite installation, holds ~300 MB of resident memory (most of it shared with the
trials it forks), and ends after ``$DET_LITE_FORKSERVER_IDLE_S`` (600 s) with no runner.
"""

from __future__ import annotations

import time
from typing import List, Sequence

import click

from determined_lite.cli._common import AliasedGroup, BadInput, Failed, echo_json, format_time
from determined_lite.cli._table import Cut, Fit, echo_rows
from determined_lite.launch._server_registry import ServerInfo, servers, stop_server

LIST_FIT = Fit(cut={"Installation": Cut.START}, drop=("Started",))


@click.group("server", cls=AliasedGroup, aliases={"ls": "list"})
def server() -> None:
    """List and stop the warm fork servers that start trials."""


@server.command("list", short_help="List this user's fork servers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_servers(as_json: bool) -> None:
    """This user's fork servers: pid, installation (* this one), resident memory, the trials
    they forked that still run, when they started, and how long they stay with no runner."""
    found = servers()
    if as_json:
        echo_json([_as_dict(s) for s in found])
        return
    now = time.time()
    echo_rows(
        ["PID", "Installation", "Memory (MiB)", "Trials", "Started", "Up (s)", "Idle Limit (s)"],
        [
            (
                s.pid,
                ("* " if s.this_installation else "") + s.det_lite,
                round(s.rss / 2**20),
                s.children,
                format_time(s.started),
                round(now - s.started),
                round(s.idle_s),
            )
            for s in found
        ],
        LIST_FIT,
        False,
    )


@server.command("stop", short_help="Stop fork servers (this installation's by default).")
@click.argument("pids", nargs=-1, type=int)
@click.option("--all", "stop_all", is_flag=True, help="Every one of this user's fork servers.")
def stop(pids: Sequence[int], stop_all: bool) -> None:
    """Stop this installation's fork server, the ones whose PIDS are given, or --all. Trials
    they forked run on; the next trial starts a new server."""
    if pids and stop_all:
        raise click.UsageError("give PIDS or --all, not both")
    found = servers()
    chosen: List[ServerInfo] = [
        s for s in found if stop_all or (s.pid in pids if pids else s.this_installation)
    ]
    unknown = sorted(set(pids) - {s.pid for s in found})
    if unknown:
        raise BadInput(f"no fork server of yours has pid {unknown[0]} ('det-lite server list' shows them)")
    for info in chosen:
        if not stop_server(info):
            raise Failed(f"fork server {info.pid} did not stop within 10 s")
        click.echo(f"Stopped fork server {info.pid}.")
    if not chosen:
        click.echo("No fork server to stop.")


def _as_dict(info: ServerInfo) -> dict:
    return {
        "pid": info.pid,
        "installation": info.det_lite,
        "this_installation": info.this_installation,
        "python": info.python,
        "memory_bytes": info.rss,
        "trials": info.children,
        "started": info.started,
        "idle_limit_s": info.idle_s,
        "socket": info.socket,
    }
