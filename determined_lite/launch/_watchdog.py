"""The stall watchdog: a worker that makes no progress for ``$DET_LITE_STALL_TIMEOUT`` seconds
ends the trial, naming the stuck rank and the hook it entered last.

Each worker keeps a :class:`Heartbeat` (attribute writes at every hook, and at every Core API
call of a script trial); a daemon thread (:class:`StallWatchdog`) writes it to
``<result>.heartbeat.rank<N>.json`` and, when no heartbeat moved for longer than the timeout,
names the rank furthest behind and calls ``on_stall``. Set-up has its own clock
(``$DET_LITE_SETUP_TIMEOUT``). Standard library only. The contract: docs/design.md, "Stall
watchdog".
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
import threading
import time
import traceback
from typing import Callable, List, Optional

from determined_lite._timeouts import SETUP_TIMEOUT_ENV, STALL_TIMEOUT_ENV, env_seconds

DEFAULT_STALL_TIMEOUT_S = 1200.0
SETUP_HOOK = "setup"  # a heartbeat's hook before the worker entered any
_MAX_POLL_S = 5.0


def stall_timeout() -> Optional[float]:
    """``$DET_LITE_STALL_TIMEOUT`` in seconds (default 1200); None when it is 0 (no watchdog)."""
    return env_seconds(STALL_TIMEOUT_ENV, DEFAULT_STALL_TIMEOUT_S) or None


def setup_timeout(stall: float) -> float:
    """``$DET_LITE_SETUP_TIMEOUT``: how long a worker's set-up may go without a hook (default:
    the larger of 1200 s and the ``stall`` timeout; 0: set-up is never a stall)."""
    return env_seconds(SETUP_TIMEOUT_ENV, max(DEFAULT_STALL_TIMEOUT_S, stall)) or float("inf")


@dataclasses.dataclass
class Heartbeat:
    """Where one worker is: the hook it entered last, the batch, and when (epoch seconds)."""

    rank: int
    hook: str = SETUP_HOOK
    batch: Optional[int] = None
    since: float = dataclasses.field(default_factory=time.time)
    # Hooks every rank enters, counted: ranks run the same sequence, so the lowest count is the
    # rank that is behind (the stuck one); the others wait for it in a collective.
    position: int = 0

    def enter(self, hook: str, batch: Optional[int] = None, every_rank: bool = True) -> None:
        self.hook, self.since = hook, time.time()
        if batch is not None:
            self.batch = batch
        if every_rank:
            self.position += 1

    def describe(self) -> str:
        where = f" (batch {self.batch})" if self.batch is not None else ""
        return f"rank {self.rank} in {self.hook}{where}"


def heartbeat_file(result_path: str, rank: int) -> str:
    return f"{result_path}.heartbeat.rank{rank}.json"


def read_heartbeats(result_path: str) -> List[Heartbeat]:
    """The heartbeats the workers of the current run wrote (unreadable ones passed over)."""
    beats = []
    for path in glob.glob(glob.escape(result_path) + ".heartbeat.rank*.json"):
        try:
            with open(path) as f:
                beats.append(Heartbeat(**json.load(f)))
        except (OSError, ValueError, TypeError):
            continue
    return beats


def remove_heartbeats(result_path: str) -> None:
    for path in glob.glob(glob.escape(result_path) + ".heartbeat.rank*.json*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _write(path: str, beat: Heartbeat) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(dataclasses.asdict(beat), f)
    os.replace(tmp, path)


def stall_message(stuck: Heartbeat, timeout: float, now: float) -> str:
    knob = SETUP_TIMEOUT_ENV if stuck.hook == SETUP_HOOK and stuck.position == 0 else STALL_TIMEOUT_ENV
    return (
        f"stalled: {stuck.describe()} made no progress for {now - stuck.since:.0f} s "
        f"(${knob}={timeout:g}); stopping every worker of the trial"
    )


def main_thread_stack() -> List[traceback.FrameSummary]:
    """The Python stack of this process's main thread (where the trial runs), most recent call
    last: where a stalled rank is stuck."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    return list(traceback.extract_stack(frame)) if frame is not None else []


class StallWatchdog:
    """Watches one worker's :class:`Heartbeat` on a daemon thread (see the module docstring)."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        result_path: str,
        timeout: float,
        on_stall: Callable[[str], None],
        setup_timeout: Optional[float] = None,
    ) -> None:
        self.heartbeat, self.result_path, self.timeout = heartbeat, result_path, timeout
        self.setup_timeout = timeout if setup_timeout is None else setup_timeout
        self.stuck: Optional[Heartbeat] = None  # the rank named stuck, set before ``on_stall``
        self._on_stall = on_stall
        self._poll = min(_MAX_POLL_S, max(0.05, timeout / 10))
        # A rank waiting on the stuck one gives the stuck rank's watchdog this long to report
        # first (so the launcher names it), then reports itself (the stuck rank may hold the GIL).
        self._grace = max(2.0, 3 * self._poll)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="det-lite-stall-watchdog", daemon=True)

    def start(self) -> "StallWatchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        own = heartbeat_file(self.result_path, self.heartbeat.rank)
        while not self._stop.wait(self._poll):
            beat = dataclasses.replace(self.heartbeat)  # a consistent copy
            try:
                _write(own, beat)
            except OSError:
                pass  # the watchdog still works for this rank alone
            now = time.time()
            if now - beat.since < self.limit(beat):
                continue
            peers = [b for b in read_heartbeats(self.result_path) if b.rank != beat.rank]
            if any(now - b.since < self.limit(b) for b in peers):
                continue  # another rank made progress: the trial did
            stuck = min(peers + [beat], key=lambda b: (b.position, b.since, b.rank))
            if stuck.rank != beat.rank and self._stop.wait(self._grace):
                return  # the stuck rank's own watchdog spoke first and the launcher stopped us
            self.stuck = stuck
            self._on_stall(stall_message(stuck, self.limit(stuck), time.time()))
            return

    def limit(self, beat: Heartbeat) -> float:
        """How long ``beat`` may stay where it is: set-up has its own clock."""
        in_setup = beat.hook == SETUP_HOOK and beat.position == 0
        return self.setup_timeout if in_setup else self.timeout
