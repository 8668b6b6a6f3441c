"""The fork server's memory on huge pages (launch/_hugepages.py): which ranges it asks for, and
that an idle server's memory is on them where the kernel offers ``MADV_COLLAPSE``."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from determined_lite.launch import _forkserver
from determined_lite.launch._hugepages import HUGE_PAGE, PIECE, collapsible_ranges
from tests.cli_helpers import REPO
from tests.timing import budget

MIB = 1 << 20
UNNAMED = 0x7F00_1000_0000  # the 64 MiB unnamed mapping of MAPS
MAPS = f"""\
{0x55d4_0000_0000:x}-{0x55d4_0000_0000 + 1 * MIB:x} r--p 00000000 08:01 123 /usr/bin/python3.11
{0x55d4_0100_0000 + MIB:x}-{0x55d4_0100_0000 + 15 * MIB:x} rw-p 00000000 00:00 0 [heap]
7f00_0000_0000-7f00_0030_0000 rw-p 00000000 00:00 0
7f00_1000_0000-7f00_1400_0000 rw-p 00000000 00:00 0
7f00_2000_0000-7f00_2080_0000 rw-p 00001000 08:01 456 /usr/lib/libtorch_cpu.so
7f00_3000_0000-7f00_3080_0000 rwxp 00000000 00:00 0
7f00_4000_0000-7f00_4080_0000 r--p 00000000 00:00 0
7ffd_0000_0000-7ffd_0040_0000 rw-p 00000000 00:00 0 [stack]
""".replace("_", "")


def test_the_ranges_are_whole_huge_pages_of_private_writable_anonymous_memory():
    heap = 0x55D4_0100_0000
    assert collapsible_ranges(MAPS) == [
        # the heap from its first 2 MiB boundary (it starts 1 MiB past one) to its last
        (heap + 2 * MIB, heap + 10 * MIB),
        (heap + 10 * MIB, heap + 14 * MIB),
        # 3 MiB unnamed: one whole huge page
        (0x7F00_0000_0000, 0x7F00_0000_0000 + HUGE_PAGE),
        # 64 MiB unnamed: pieces of PIECE
        *[(UNNAMED + k * PIECE, UNNAMED + (k + 1) * PIECE) for k in range(64 * MIB // PIECE)],
    ]  # never a file's pages, an executable or read-only mapping, or the stack


def _anon_huge_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def _kernel_collapses() -> bool:
    """Linux 6.1+ with transparent huge pages built in: MADV_COLLAPSE exists."""
    release = os.uname().release.split(".")
    try:
        version = (int(release[0]), int(release[1].split("-")[0]))
    except (IndexError, ValueError):
        return False
    return version >= (6, 1) and os.path.isdir("/sys/kernel/mm/transparent_hugepage")


def test_an_idle_fork_server_has_its_memory_on_huge_pages():
    if not _kernel_collapses():
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux 6.1+ with transparent huge pages)")
    env = dict(os.environ, PYTHONPATH=REPO, HUGE_PAGES_TEST=uuid.uuid4().hex)  # a server of its own
    server = _forkserver.ForkServer(env)
    try:
        assert server._ready.wait(budget(120)) and not server.lost
        deadline = time.monotonic() + budget(60)
        huge = _anon_huge_kib(server.pid)
        while huge < 100 * 1024 and time.monotonic() < deadline:
            time.sleep(0.1)
            huge = _anon_huge_kib(server.pid)
        # torch's import leaves ~220 MB of anonymous memory; most of it is on 2 MiB pages now
        assert huge >= 100 * 1024, f"{huge} KiB on huge pages"
    finally:
        server.close()
