"""Where a Ray trial run's own cost goes (issue 23, measure 12's breakdown; not a timed test).

Starts the tests' 2-node cluster (``tests/ray_cluster.py``), then does what ``launch/_ray.py``'s
``RayRun`` does for each of ``N`` one-slot runs, 2 at a time (as the 16-trial grid), timing each
phase: ``pg`` (placement group created until ready), ``actor`` (the ``SlotWorker`` actor with the
executor's options until its first call returns: Ray starts a worker process for it), ``start``
(its worker subprocess started: here ``python -c pass``, not det-lite's worker), ``take`` (the
``take`` round trips until that process's exit is seen) and ``cleanup`` (kill, remove the group).

    PYTHONPATH=$PWD python benchmarks/ray_phases.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("pg", "actor", "start", "take", "cleanup")


def one_run(actor_cls: Any, options: Any) -> Tuple[float, ...]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    marks = [time.monotonic()]
    pg = placement_group([dict(options.resources_per_slot)], strategy=options.placement.upper())
    ray.get(pg.ready())
    marks.append(time.monotonic())
    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    actor = actor_cls.options(**options.actor_options(), scheduling_strategy=strategy).remote()
    ray.get(actor.node.remote())
    marks.append(time.monotonic())
    ray.get(actor.start.remote([sys.executable, "-c", "pass"], {}, REPO))
    marks.append(time.monotonic())
    while ray.get(actor.take.remote(0.5))["exit"] is None:
        pass
    marks.append(time.monotonic())
    ray.kill(actor, no_restart=True)
    remove_placement_group(pg)
    marks.append(time.monotonic())
    return tuple(b - a for a, b in zip(marks, marks[1:]))


def main(runs: int) -> None:
    sys.path.insert(0, REPO)
    from tests.ray_cluster import TestCluster

    began = time.monotonic()
    cluster = TestCluster()
    print(f"cluster start: {time.monotonic() - began:.2f} s", flush=True)
    try:
        import ray

        from determined_lite.launch._ray_cluster import RayOptions
        from determined_lite.launch._ray_slot import SlotWorker

        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        actor_cls, options = ray.remote(SlotWorker), RayOptions.from_config({})
        times: Dict[str, List[float]] = {name: [] for name in PHASES}
        began = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            for run in pool.map(lambda _: one_run(actor_cls, options), range(runs)):
                for name, seconds in zip(PHASES, run):
                    times[name].append(seconds)
        print(f"{runs} runs, 2 at a time: {time.monotonic() - began:.2f} s", flush=True)
        for name, values in times.items():
            print(f"{name:8s} median {statistics.median(values):.3f} s  max {max(values):.3f} s")
        ray.shutdown()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
