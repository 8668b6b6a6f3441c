"""Determined's per-machine collectives and constructors on det-lite's DistributedContext
(``det.core.DistributedContext``): ``allgather_local``, ``gather_local``, ``broadcast_local``,
``get_num_agents``, ``from_torch_distributed`` / ``from_horovod`` inside a script trial."""

from __future__ import annotations

from typing import Any, List

import pytest

from determined_lite.distributed import DistributedContext, SingleProcessContext
from determined_lite.runtime import _cluster


class Simulated(DistributedContext):
    """Rank ``rank`` of 4 workers on 2 machines (2 each); ``allgather`` returns what the 4 would
    send, each worker's object being ``f(rank)``."""

    backend = "torch"

    def __init__(self, rank: int) -> None:
        super().__init__(rank, 4, rank % 2, 2, rank // 2, 2)

    def allgather(self, obj: Any) -> List[Any]:
        # every worker sends (cross_rank, local_rank, "obj of <rank>"), as allgather_local does
        return [(r // 2, r % 2, f"obj of {r}") if isinstance(obj, tuple) else obj for r in range(4)]

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        raise AssertionError("not used")

    def barrier(self) -> None:
        pass


@pytest.mark.parametrize("rank", range(4))
def test_local_collectives_stay_on_the_machine(rank):
    dist = Simulated(rank)
    machine = [f"obj of {2 * (rank // 2)}", f"obj of {2 * (rank // 2) + 1}"]
    assert dist.allgather_local("x") == machine
    assert dist.gather_local("x") == (machine if rank % 2 == 0 else None)  # the local chief only
    assert dist.broadcast_local("x") == machine[0]
    assert dist.get_num_agents() == 2


def test_constructors_return_the_context_the_worker_joined():
    class Trial:
        distributed = Simulated(1)

    _cluster.set_active_trial(Trial())
    try:
        assert DistributedContext.from_torch_distributed() is Trial.distributed
        with pytest.raises(RuntimeError, match="runs on torch"):
            DistributedContext.from_horovod()  # a 4-worker torch trial has no Horovod context
        Trial.distributed = SingleProcessContext()
        assert DistributedContext.from_horovod() is Trial.distributed  # one slot: either engine
    finally:
        _cluster.set_active_trial(None)
