"""Huge pages under the fork server's memory: a cheaper ``fork()`` and child exit (issue 27).

``fork()`` copies one page-table entry per 4 KiB page of the server's anonymous memory (~220 MB
once torch is imported: ~55,000 entries) and the child's exit removes them again. Per run of a
small trial that cost ~3.5 ms of the server's ``fork()`` and ~5 ms of the child's own time
(benchmarks/README.md, round 9). Backed by 2 MiB pages, each 2 MiB is one entry. Linux 6.1+
puts a range on huge pages on request (``madvise(MADV_COLLAPSE)``, whatever the system's
transparent-huge-page setting); the server asks for its heap and unnamed private mappings,
one piece at a time, only while it has no child (pages a child shares do not collapse), so a
request waits at most one piece (~20 ms), and plans again only between runners' commands.
Elsewhere, or where the kernel refuses a range, nothing changes: the pages stay as they were,
and a child's memory is the same either way.
"""

from __future__ import annotations

import sys
from typing import Callable, List, Optional, Tuple

MADV_COLLAPSE = 25  # <linux/mman.h>, Linux 6.1
HUGE_PAGE = 1 << 21
PIECE = 4 * HUGE_PAGE


def collapsible_ranges(maps: str) -> List[Tuple[int, int]]:
    """The whole 2 MiB pages inside the private writable anonymous mappings (``[heap]`` and
    unnamed ones) of ``/proc/<pid>/maps`` text, cut into pieces of at most :data:`PIECE`."""
    out: List[Tuple[int, int]] = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        start = -(-low // HUGE_PAGE) * HUGE_PAGE
        end = high - high % HUGE_PAGE
        out += [(a, min(a + PIECE, end)) for a in range(start, end, PIECE)]
    return out


def _madvise() -> Optional[Callable[[int, int, int], int]]:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: the runner imports the server's module for its constants, not this
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.madvise
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    func.restype = ctypes.c_int
    return func


class HugePages:
    """Collapses this process's anonymous memory into huge pages, one :meth:`step` at a time.

    :meth:`plan` lists the pieces (again after the memory changed); a pass in which no piece
    collapsed (an older kernel, a refusing system) plans nothing more."""

    def __init__(self) -> None:
        self._madvise = _madvise()
        self._todo: List[Tuple[int, int]] = []
        self._collapsed = True  # whether the last pass collapsed anything

    @property
    def pending(self) -> bool:
        return bool(self._todo)

    def plan(self) -> None:
        if self._madvise is None or not self._collapsed:
            return
        try:
            with open("/proc/self/maps") as f:
                self._todo = collapsible_ranges(f.read())
        except OSError:
            self._todo = []
        self._collapsed = False

    def step(self) -> None:
        """Ask for one piece (a refused piece stays as it was)."""
        if not self._todo or self._madvise is None:
            return
        start, end = self._todo.pop(0)
        if self._madvise(start, end - start, MADV_COLLAPSE) == 0:
            self._collapsed = True
