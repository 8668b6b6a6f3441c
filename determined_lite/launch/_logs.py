"""Rank-prefixed output: every line a worker prints starts with ``[rank N]``."""

from __future__ import annotations

import io
import sys
from typing import TextIO


class _PrefixedStream(io.TextIOBase):
    """Text stream that prefixes each line written through it."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._stream = stream
        self._prefix = prefix
        self._at_line_start = True

    def write(self, text: str) -> int:
        if not text:
            return 0
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        self._stream.write("".join(out))
        if self._at_line_start:
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
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
