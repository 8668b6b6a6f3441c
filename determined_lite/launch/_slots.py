"""Where each rank of a gang runs, whatever executor placed it: its node, its local rank there
and the GPUs it holds. Engines (``launch/_engines.py``) build their rank environments from these;
executors that place ranks themselves (``resources.executor: ray``) make them."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one rank runs: the index of its placement (a Ray bundle's actor), its node and its
    local rank there."""

    actor: int
    node_id: str
    ip: str
    host: str
    node_index: int  # the node's order among the trial's nodes (rank 0's node is 0)
    local_rank: int
    local_size: int
    gpus: Tuple[str, ...] = ()  # the GPU ids this slot holds on its node


def node_count(slots: Sequence[Slot]) -> int:
    """How many nodes the gang spans."""
    return len({s.node_id for s in slots})


def assign_ranks(infos: Sequence[Mapping[str, Any]]) -> List[Slot]:
    """Ranks node by node (in bundle order), so that each node's ranks are contiguous."""
    order: List[str] = []
    members: Dict[str, List[int]] = {}
    for i, info in enumerate(infos):
        if info["node_id"] not in members:
            order.append(info["node_id"])
            members[info["node_id"]] = []
        members[info["node_id"]].append(i)
    slots = []
    for node_index, node_id in enumerate(order):
        for local_rank, actor in enumerate(members[node_id]):
            info = infos[actor]
            gpus = tuple(str(g) for g in info.get("gpus") or ())
            slots.append(
                Slot(
                    actor,
                    node_id,
                    info["ip"],
                    info["host"],
                    node_index,
                    local_rank,
                    len(members[node_id]),
                    gpus,
                )
            )
    return slots


def gpu_env(slots: Sequence[Slot], rank: int) -> Dict[str, str]:
    """The GPUs of ``rank``'s node that the trial holds, in local-rank order, as every rank of
    that node sees them (as Ray Train shares them, so NCCL can use the node's links): local rank
    r's own GPU is device r. Nothing when the trial holds no GPU (the node's own view stays)."""
    me = slots[rank]
    mine = sorted((s for s in slots if s.node_id == me.node_id), key=lambda s: s.local_rank)
    gpus = [g for s in mine for g in s.gpus]
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else {}
