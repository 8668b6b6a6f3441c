"""``det-lite ui`` (alias ``dashboard``): the web dashboard on this machine's loopback.

Prints the URL (with its token) once the port is bound, then serves until Ctrl-C or SIGTERM,
also when a shell started it with SIGINT ignored (a background job), as ``det-lite tensorboard``.
The port is stable (``DEFAULT_PORT``, or ``$DET_LITE_UI_PORT``) and so is the token (kept in
``<home>/ui-token``, mode 0600): a restart keeps open tabs and bookmarks working.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import signal
import socket
import threading

import click

from determined_lite.cli._common import Failed, open_store, warn
from determined_lite.store import det_lite_home

DEFAULT_HOST = "127.0.0.1"  # loopback unless told otherwise
DEFAULT_PORT = 8470
PORT_ENV = "DET_LITE_UI_PORT"
TOKEN_FILE = "ui-token"


def stable_token(home: str) -> str:
    """The dashboard's token, kept in ``<home>/ui-token`` (created 0600 on first use)."""
    path = os.path.join(home, TOKEN_FILE)
    try:
        with open(path) as f:
            token = f.read().strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_hex(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def _is_loopback(host: str) -> bool:
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return True  # binding fails with its own error
    return all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def _exposure(host: str, port: int) -> str:
    """Who can reach a server bound to a non-loopback ``host``."""
    if host in ("0.0.0.0", "::", ""):
        who = f"every network interface of this machine: anyone who can reach it on port {port}"
    else:
        who = f"{host}: anyone on that network who can reach {host}:{port}"
    return (
        f"--host {host} serves the dashboard on {who} can open it with the token "
        "(and pause, activate or kill experiments); the traffic is not encrypted"
    )


@click.command("ui", short_help="Serve the web dashboard.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    envvar=PORT_ENV,
    show_default=True,
    help=f"Port to serve on (0: any free port; also ${PORT_ENV}).",
)
@click.option(
    "--host", default=DEFAULT_HOST, show_default=True, help="Address to bind (loopback by default)."
)
def ui(port: int, host: str) -> None:
    """Serve a web dashboard of the experiments in the store (stop it with Ctrl-C).

    Open the printed URL: it carries the token every request needs.
    """
    from determined_lite.ui import DashboardServer

    open_store()  # created (and upgraded) here: the dashboard opens it read-only
    try:
        server = DashboardServer(host, port, token=stable_token(det_lite_home()))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise Failed(
                f"cannot serve on {host}:{port}: the port is taken (another det-lite ui?); "
                f"choose one with --port N or ${PORT_ENV} (0: any free port)"
            ) from None
        raise Failed(f"cannot serve on {host}:{port}: {e.strerror}") from None
    if not _is_loopback(host):
        warn(_exposure(host, server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, name="det-lite-ui", daemon=True)
    thread.start()
    # Ctrl-C and SIGTERM stop the server (exit 0), also when a shell started this process with
    # SIGINT ignored, and also right after the URL is printed; the pages only read, and a
    # button's write is one short transaction.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        click.echo(f"det-lite dashboard at {server.url()} (Ctrl-C to stop)")
        while thread.is_alive():
            thread.join(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
