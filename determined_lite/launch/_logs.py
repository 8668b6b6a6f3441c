"""Rank-prefixed output: every line a worker prints starts with ``[rank N]``."""

from __future__ import annotations

import io
import re
import sys
from typing import TextIO

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")


class _PrefixedStream(io.TextIOBase):
    """Text stream that prefixes each line written through it.

    A line reaches the underlying stream in one write, prefix and end together: workers share one
    unbuffered pipe, and ``print`` writes its text and its ``\\n`` separately, so writing pieces
    as they come would let another rank's line land between them. A line's unended tail waits for
    its end, or for :meth:`flush`.
    """

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._stream = stream
        self._prefix = prefix
        self._pending = ""
        self._mid_line = False  # a flush wrote the current line's prefix and start already

    def write(self, text: str) -> int:
        data = self._pending + text
        end = max(data.rfind("\n"), data.rfind("\r")) + 1
        self._pending = data[end:]
        if end:
            lines = _LINE.findall(data[:end])
            head = "" if self._mid_line else self._prefix
            self._stream.write(head + self._prefix.join(lines))
            self._stream.flush()
            self._mid_line = False
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(("" if self._mid_line else self._prefix) + self._pending)
            self._pending, self._mid_line = "", True
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")


def rank_prefix(rank: int) -> str:
    """What starts each line of a rank's output in the trial's log."""
    return f"[rank {rank}] "


def install_rank_prefix(rank: int, size: int) -> None:
    """Prefix this process's stdout and stderr lines with its rank (only when size > 1)."""
    if size <= 1:
        return
    prefix = rank_prefix(rank)
    if not isinstance(sys.stdout, _PrefixedStream):
        sys.stdout = _PrefixedStream(sys.stdout, prefix)
    if not isinstance(sys.stderr, _PrefixedStream):
        sys.stderr = _PrefixedStream(sys.stderr, prefix)
