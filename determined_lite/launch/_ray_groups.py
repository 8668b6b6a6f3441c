"""Placement groups a Ray experiment keeps between its runs, so the next run of the same gang
shape starts on a placed group instead of waiting for Ray to free the last one's resources and
place a new one (about a second on every node: Ray reports freed resources periodically).

A run that ends gives its group back (its actors, or its slot on the node's actor, are gone; the
group holds resources only); the next run of that many slots takes it. A group nobody takes within
:data:`HOLD_S` is removed, as every group is when the executor closes, so an experiment never keeps
what it does not use: a group held is counted as this experiment's free capacity
(``RayExecutor.capacity``). Reusing a group is not reusing a process: each run's workers are new.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Tuple

HOLD_S = 5.0  # the runner starts its next trial within milliseconds; seconds on a loaded box


class HeldGroups:
    """The experiment's placement groups between runs, by their number of bundles."""

    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_s, self._clock = hold_s, clock
        self._idle: Dict[int, List[Tuple[Any, float]]] = {}
        self._lock = threading.Lock()

    def take(self, bundles: int) -> Any:
        """A held group of ``bundles`` bundles (the most recently given), or None."""
        self.expire()
        with self._lock:
            groups = self._idle.get(bundles)
            return groups.pop()[0] if groups else None

    def give(self, bundles: int, group: Any) -> None:
        """``group`` (``bundles`` bundles) is free: held for the next run for :attr:`hold_s`."""
        with self._lock:
            self._idle.setdefault(bundles, []).append((group, self._clock()))
        self.expire()

    def held_slots(self) -> int:
        """The bundles held now (resources Ray counts as used, free for this experiment's runs)."""
        self.expire()
        with self._lock:
            return sum(n * len(groups) for n, groups in self._idle.items())

    def expire(self) -> None:
        """Remove the groups held longer than :attr:`hold_s`."""
        cutoff = self._clock() - self.hold_s
        with self._lock:
            stale = [g for groups in self._idle.values() for g, since in groups if since < cutoff]
            for n, groups in self._idle.items():
                self._idle[n] = [(g, since) for g, since in groups if since >= cutoff]
        _remove(stale)

    def close(self) -> None:
        """Remove every held group (the executor closes)."""
        with self._lock:
            groups = [g for held in self._idle.values() for g, _ in held]
            self._idle.clear()
        _remove(groups)


def _remove(groups: List[Any]) -> None:
    import ray

    if not groups or not ray.is_initialized():  # no connection: nothing to remove (and no new Ray)
        return
    from ray.util.placement_group import remove_placement_group

    for group in groups:
        try:
            remove_placement_group(group)
        except Exception:  # noqa: BLE001 -- the cluster may be gone
            pass
