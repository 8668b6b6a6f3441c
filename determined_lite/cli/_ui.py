"""``det-lite ui`` (alias ``dashboard``): the web dashboard on this machine's loopback.

Prints the URL (with its token) once the port is bound, then serves until Ctrl-C or SIGTERM,
also when a shell started it with SIGINT ignored (a background job), as ``det-lite tensorboard``.
"""

from __future__ import annotations

import errno
import signal
import threading

import click

from determined_lite.cli._common import Failed, open_store

DEFAULT_HOST = "127.0.0.1"  # loopback unless told otherwise


@click.command("ui", short_help="Serve the web dashboard.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port to serve on (0: any free port).",
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
        server = DashboardServer(host, port)
    except OSError as e:
        taken = e.errno == errno.EADDRINUSE
        raise Failed(f"cannot serve on {host}:{port}: {'port taken' if taken else e.strerror}") from None
    thread = threading.Thread(target=server.serve_forever, name="det-lite-ui", daemon=True)
    thread.start()
    click.echo(f"det-lite dashboard at {server.url()} (Ctrl-C to stop)")
    # Ctrl-C and SIGTERM stop the server (exit 0), also when a shell started this process with
    # SIGINT ignored; the pages only read, and a button's write is one short transaction.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        while thread.is_alive():
            thread.join(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
