"""Running a command in a pseudo-terminal and reading what a user would see on the screen.

``run_in_pty`` gives the command a real terminal (``isatty()`` is true, so progress bars draw);
``render`` replays the bytes it wrote on a small VT100 model (carriage return, new line,
cursor up/down/left/right, erase in line, auto-wrap at the terminal width) and returns the
lines left on the screen, scrollback included. Standard library only.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from typing import Dict, List, Optional, Sequence

from tests.timing import budget

_CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


@dataclasses.dataclass
class PtyRun:
    returncode: int
    raw: str  # everything the command wrote, as decoded text (escape sequences included)
    width: int

    @property
    def screen(self) -> List[str]:
        return render(self.raw, self.width)


def run_in_pty(
    argv: Sequence[str],
    *,
    width: int = 100,
    timeout: float = 240,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[str] = None,
) -> PtyRun:
    """Run ``argv`` with stdin, stdout and stderr on a ``width``-column pseudo-terminal
    (``timeout``: for a quiet machine, stretched by the load)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    env = dict(os.environ if env is None else env)
    env["COLUMNS"], env["LINES"] = str(width), "50"
    env.setdefault("TERM", "xterm")
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    chunks: List[bytes] = []
    deadline = time.monotonic() + budget(timeout)
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{argv} did not finish in {timeout} s")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the command exited and the slave side is closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
    proc.wait()
    return PtyRun(proc.returncode, b"".join(chunks).decode("utf-8", "replace"), width)


class _Screen:
    """A ``width``-column terminal that never scrolls lines away: a cursor over rows of cells."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: List[List[str]] = [[]]
        self.row = self.col = 0
        self.pending_wrap = False  # the last column was written: the next character wraps

    def line(self, r: int) -> List[str]:
        while len(self.lines) <= r:
            self.lines.append([])
        return self.lines[r]

    def control(self, params: str, op: str) -> None:
        """Cursor up/down/right/left and erase in line (``ESC [ params op``)."""
        n = int(params) if params.isdigit() else 1
        if op == "A":
            self.row = max(0, self.row - n)
        elif op == "B":
            self.row += n
        elif op == "C":
            self.col = min(self.width - 1, self.col + n)
        elif op == "D":
            self.col = max(0, self.col - n)
        elif op == "K":
            self.erase(params)
        self.pending_wrap = False

    def erase(self, params: str) -> None:
        cur = self.line(self.row)
        if params in ("", "0"):
            del cur[self.col :]
        elif params == "2":
            cur.clear()
        elif params == "1":
            cur[: self.col + 1] = [" "] * min(len(cur), self.col + 1)

    def char(self, ch: str) -> None:
        if ch == "\r":
            self.col, self.pending_wrap = 0, False
        elif ch == "\n":  # a pty's output has \r\n (onlcr); a bare \n also starts the line
            self.row, self.col, self.pending_wrap = self.row + 1, 0, False
        elif ch == "\b":
            self.col = max(0, self.col - 1)
        elif ch >= " ":
            self.put(ch)

    def put(self, ch: str) -> None:
        if self.pending_wrap:
            self.row, self.col, self.pending_wrap = self.row + 1, 0, False
        cur = self.line(self.row)
        while len(cur) < self.col:
            cur.append(" ")
        if self.col < len(cur):
            cur[self.col] = ch
        else:
            cur.append(ch)
        if self.col == self.width - 1:
            self.pending_wrap = True
        else:
            self.col += 1


def render(raw: str, width: int) -> List[str]:
    """The lines ``raw`` leaves on a ``width``-column terminal that never scrolls lines away."""
    screen = _Screen(width)
    i = 0
    while i < len(raw):
        if raw[i] == "\x1b":
            m = _CSI.match(raw, i)
            if m:
                screen.control(m.group(1), m.group(2))
                i = m.end()
            else:
                i += 2
            continue
        screen.char(raw[i])
        i += 1
    text = ["".join(chars).rstrip() for chars in screen.lines]
    while text and not text[-1]:
        text.pop()
    return text
