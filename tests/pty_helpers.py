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
    """Run ``argv`` with stdin, stdout and stderr on a ``width``-column pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    env = dict(os.environ if env is None else env)
    env["COLUMNS"], env["LINES"] = str(width), "50"
    env.setdefault("TERM", "xterm")
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
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


def render(raw: str, width: int) -> List[str]:
    """The lines ``raw`` leaves on a ``width``-column terminal that never scrolls lines away."""
    lines: List[List[str]] = [[]]
    row = col = 0
    pending_wrap = False

    def line(r: int) -> List[str]:
        while len(lines) <= r:
            lines.append([])
        return lines[r]

    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\x1b":
            m = _CSI.match(raw, i)
            if m:
                params, op = m.group(1), m.group(2)
                n = int(params) if params.isdigit() else 1
                if op == "A":
                    row = max(0, row - n)
                elif op == "B":
                    row += n
                elif op == "C":
                    col = min(width - 1, col + n)
                elif op == "D":
                    col = max(0, col - n)
                elif op == "K":
                    cur = line(row)
                    if params in ("", "0"):
                        del cur[col:]
                    elif params == "2":
                        cur.clear()
                    elif params == "1":
                        cur[: col + 1] = [" "] * min(len(cur), col + 1)
                pending_wrap = False
                i = m.end()
                continue
            i += 2
            continue
        if ch == "\r":
            col, pending_wrap = 0, False
        elif ch == "\n":  # a pty's output has \r\n (onlcr); a bare \n also starts the line
            row, col, pending_wrap = row + 1, 0, False
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch >= " ":
            if pending_wrap:
                row, col, pending_wrap = row + 1, 0, False
            cur = line(row)
            while len(cur) < col:
                cur.append(" ")
            if col < len(cur):
                cur[col] = ch
            else:
                cur.append(ch)
            if col == width - 1:
                pending_wrap = True
            else:
                col += 1
        i += 1
    text = ["".join(chars).rstrip() for chars in lines]
    while text and not text[-1]:
        text.pop()
    return text
