"""TensorBoard's server in this process over experiments' event files: ``det-lite tensorboard``
and the dashboard's TensorBoard button both start it here.

TensorBoard runs on a daemon thread (``tensorboard.program``), so the URL is known once the port
is bound: a taken port gives way to the next free one (up to ``PORT_TRIES`` above it, then any).
With several experiments, runs are named ``experiment_<id>/trial_<id>``.
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import List, Sequence, Tuple

PORT_TRIES = 10


def logdir_arguments(logdirs: Sequence[Tuple[int, str]]) -> List[str]:
    """``--logdir DIR`` for one experiment; ``--logdir_spec experiment_1:DIR,...`` for several."""
    if len(logdirs) == 1:
        return ["--logdir", logdirs[0][1]]
    return ["--logdir_spec", ",".join(f"experiment_{eid}:{path}" for eid, path in logdirs)]


def tensorboard_command(arguments: Sequence[str], port: int, host: str) -> List[str]:
    """The TensorBoard command line (for ``--no-launch``), run with this interpreter."""
    return [sys.executable, "-m", "tensorboard.main", *arguments, "--port", str(port), "--host", host]


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def first_free_port(host: str, port: int) -> int:
    """``port`` or one of the next ``PORT_TRIES - 1`` when free; 0 (any) when none is, or when
    ``port`` is 0."""
    if port == 0:
        return 0
    for candidate in range(port, min(port + PORT_TRIES, 65536)):
        if _port_free(host, candidate):
            return candidate
    return 0


def serve(arguments: Sequence[str], port: int, host: str) -> str:
    """Start TensorBoard's server in this process on ``port`` (or a free one); returns its URL
    once bound. The server runs on a daemon thread until the process exits."""
    from tensorboard import program

    def launch(chosen: int) -> str:
        board = program.TensorBoard()
        board.configure(argv=[None, *arguments, "--port", str(chosen), "--host", host])
        return str(board.launch())

    try:
        return launch(first_free_port(host, port))
    except program.TensorBoardPortInUseError:  # taken since it was probed
        return launch(0)


__all__ = ["PORT_TRIES", "first_free_port", "logdir_arguments", "serve", "tensorboard_command"]
