"""Worker output: each rank-prefixed line reaches the shared pipe whole, prefix first; the
worker's logging set-up."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import List

import pytest

from determined_lite.launch._logs import _PrefixedStream

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Writes:
    """An underlying stream that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: List[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_print_reaches_the_stream_in_one_write() -> None:
    under = _Writes()
    print("script ran", file=_PrefixedStream(under, "[rank 1] "))  # type: ignore[arg-type]
    assert under.writes == ["[rank 1] script ran\n"]


def test_lines_end_at_newline_or_carriage_return_and_flush_writes_an_unended_tail() -> None:
    under = _Writes()
    stream = _PrefixedStream(under, "[rank 0] ")  # type: ignore[arg-type]
    stream.write("a\rb\r\nc")
    assert under.writes == ["[rank 0] a\r[rank 0] b\r\n"]
    stream.flush()
    stream.write("d\ne")
    stream.write("")
    stream.write("f\n")
    assert "".join(under.writes) == "[rank 0] a\r[rank 0] b\r\n[rank 0] cd\n[rank 0] ef\n"


PRINTER = """import sys
from determined_lite.launch._logs import install_rank_prefix
install_rank_prefix(int(sys.argv[1]), 2)
for i in range(3000):
    print("line", i, "of rank", sys.argv[1])
"""


def test_two_unbuffered_workers_on_one_pipe_never_split_a_line() -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=REPO)
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", PRINTER, str(r)], stdout=write, env=env) for r in (0, 1)]
    os.close(write)
    with os.fdopen(read) as out:
        lines = out.read().splitlines()
    assert [p.wait() for p in procs] == [0, 0]
    for r in (0, 1):
        mine = [x for x in lines if x.startswith(f"[rank {r}] ")]
        assert mine == [f"[rank {r}] line {i} of rank {r}" for i in range(3000)]
    assert len(lines) == 6000


def test_a_worker_logs_info_and_sets_the_root_level_only_when_it_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Setting a level clears every logger's cache (torch's hundreds, ~1 ms a worker): a worker
    forked from the fork server, whose root is already at INFO, does not."""
    from determined_lite.launch import worker

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    cleared: List[int] = []
    monkeypatch.setattr(logging.Logger.manager, "_clear_cache", lambda: cleared.append(1))
    worker.log_info()
    assert (root.level, len(root.handlers), cleared) == (logging.INFO, 1, [1])
    assert "%(asctime)s" in (root.handlers[0].formatter._fmt or "")  # type: ignore[union-attr]
    root.handlers = []
    cleared.clear()
    worker.log_info()  # as in a forked worker: INFO already
    assert (root.level, len(root.handlers), cleared) == (logging.INFO, 1, [])
