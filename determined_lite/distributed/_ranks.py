"""``det.core.DistributedContext(rank=..., size=..., ..., chief_ip=...)``, as Determined's scripts
build it for workers they start themselves: the workers join one torch.distributed group (gloo
on CPU, nccl with a GPU per local worker) through a torch ``TCPStore``: the one at
``$DET_LITE_CORE_STORE`` (``host:port``, hosted by the det-lite worker that runs the script, see
``launch._script_workers``), or else one that rank 0 hosts at ``chief_ip`` and ``$MASTER_PORT``
(default 29500). Determined's own ports (``pub_port``, ``pull_port``) are not used.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Optional

import torch
import torch.distributed as dist

from determined_lite._timeouts import dist_timeout
from determined_lite.runtime._cluster import CORE_STORE_ENV


def join_group(
    rank: int,
    size: int,
    local_rank: int,
    local_size: int = 1,
    chief_ip: Optional[str] = None,
    **_others: Any,
) -> torch.device:
    """Join the group as ``rank`` of ``size``; returns this worker's device: a GPU of its own
    (nccl) when the machine has one per local worker, else the CPU (gloo)."""
    host, _, port = os.environ.get(CORE_STORE_ENV, "").rpartition(":")
    hosted = bool(host)
    if not hosted:
        host, port = chief_ip or "127.0.0.1", os.environ.get("MASTER_PORT", "29500")
    timeout = datetime.timedelta(seconds=dist_timeout())
    device = torch.device("cpu")
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(local_size):
        device = torch.device("cuda", int(local_rank) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        store = dist.TCPStore(host, int(port), is_master=not hosted and rank == 0, timeout=timeout)
        prefixed = dist.PrefixStore("det.core.DistributedContext", store)
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend, store=prefixed, rank=int(rank), world_size=int(size), timeout=timeout
        )
    return device
