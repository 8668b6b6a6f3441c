"""``python3 -m determined.launch.wrap_rank RANK [--] COMMAND...`` (Determined's launch layer that
a script's own launcher puts before each worker): run COMMAND with every line of its stdout and
stderr prefixed by its rank, and exit with its status.

RANK is a number, or a comma-separated list of environment variables tried in order (e.g.
``RANK,OMPI_COMM_WORLD_RANK``). Lines end at ``\\n`` or ``\\r`` (a progress bar's redraws are
lines), as Determined's reader splits them. The prefix is det-lite's (``[rank N] ``, what the
trial's own workers print), not Determined's ``[rank=N] ``. SIGTERM and SIGINT are passed on
to COMMAND. ``--no-redirect-stdio`` is accepted (Determined's container redirect; nothing to
redirect here).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from typing import IO, List, Optional, Sequence

from determined_lite.launch._logs import rank_prefix

USAGE = "usage: python3 -m determined.launch.wrap_rank [--no-redirect-stdio] RANK [--] COMMAND..."
_LINE_END = re.compile(rb"[\r\n]")


def _rank(text: str) -> int:
    if text.isdigit():
        return int(text)
    for name in text.split(","):
        if os.environ.get(name, "").strip().isdigit():
            return int(os.environ[name])
    raise ValueError(f"wrap_rank: none of the environment variables {text!r} holds a rank")


def _forward(src: IO[bytes], dst: int, prefix: bytes) -> None:
    """Copy ``src`` to the file descriptor ``dst``, one prefixed line at a time."""
    pending = b""
    while True:
        chunk = os.read(src.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        lines = _LINE_END.split(pending)
        pending = lines.pop()
        if lines:
            os.write(dst, b"".join(prefix + line + b"\n" for line in lines))
    if pending:
        os.write(dst, prefix + pending + b"\n")


def _parse(argv: Sequence[str]) -> tuple:
    args = [a for a in argv if a != "--no-redirect-stdio"]
    if not args:
        raise ValueError(USAGE)
    command = args[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ValueError(USAGE)
    return _rank(args[0]), command


def main(argv: Optional[List[str]] = None) -> int:
    try:
        rank, command = _parse(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    prefix = rank_prefix(rank).encode()
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_forward, args=(proc.stdout, sys.stdout.fileno(), prefix), daemon=True),
        threading.Thread(target=_forward, args=(proc.stderr, sys.stderr.fileno(), prefix), daemon=True),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return proc.wait()


__all__ = ["main"]
