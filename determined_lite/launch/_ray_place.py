"""Waiting for a trial's gang on a Ray cluster, and how much of the cluster is free now.

A gang that does not fit now is not refused: it waits as a pending placement group, which is the
demand a Ray autoscaler (KubeRay's, ``ray up``'s) reads to add nodes, with one progress line
("waiting for 2 × {CPU: 1} on the Ray cluster"). Only a gang larger than every slot of the
cluster's alive nodes after ``resources.ray.placement_timeout`` seconds of waiting fails, with one
line; one that waits only for others' work to end (another experiment's, on a shared cluster)
waits as long as it takes. What is free is what Ray says is available now, so experiments that
share a cluster never count each other's slots: Ray's scheduler arbitrates between them.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

from determined_lite.launch._ray_cluster import RayOptions, cluster_slots, slots_in

WAIT_STEP_S = 0.5  # how often a waiting gang checks for a stop request
NOTE_AFTER_S = 1.0  # a gang not placed by then: its one "waiting for" line


class PlacementTimeout(Exception):
    """The gang can never fit the cluster: one line that says what it needs and what there is."""


def shape(per_slot: Mapping[str, float]) -> str:
    """``{"CPU": 1.0}`` -> ``{CPU: 1}`` (as a user writes it in the config)."""
    parts = (f"{k}: {int(v) if float(v).is_integer() else v}" for k, v in per_slot.items())
    return "{" + ", ".join(parts) + "}"


def free_slots(options: RayOptions) -> int:
    """The slots Ray reports available now on the whole cluster (every user's work subtracted)."""
    import ray

    return slots_in(ray.available_resources(), options.resources_per_slot)


def wait_placed(
    pg: Any,
    slots: int,
    options: RayOptions,
    trial_id: Optional[int],
    say: Callable[[str], None],
    stop_why: Callable[[], Optional[str]],
) -> Optional[str]:
    """Wait until the placement group ``pg`` of ``slots`` bundles is placed: None then, else
    ``stop_why``'s answer (a stop or pause asked while waiting). Says once that the gang waits;
    raises :class:`PlacementTimeout` once ``placement_timeout`` passed and the cluster's alive
    nodes still hold fewer than ``slots`` slots in all."""
    start, said = time.monotonic(), False
    while not pg.wait(WAIT_STEP_S):
        why = stop_why()
        if why is not None:
            return why
        waited = time.monotonic() - start
        if not said and waited >= NOTE_AFTER_S:
            gang = f"{slots} × {shape(options.resources_per_slot)}"
            say(f"det-lite: trial {trial_id} waiting for {gang} on the Ray cluster")
            said = True
        if waited >= options.placement_timeout:
            have = cluster_slots(options)
            if have < slots:
                raise PlacementTimeout(
                    f"trial {trial_id} needs {slots} × {shape(options.resources_per_slot)}, but after "
                    f"{options.placement_timeout:g} s (resources.ray.placement_timeout) the Ray "
                    f"cluster's nodes hold {have} in all"
                )
    return None
