"""``det-lite slot list``: the slots trials are given, as Determined's ``det slot list`` shows an
agent's: this machine's GPUs (``$DET_LITE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``, else every
GPU) or its cores (``$DET_LITE_SLOTS``, else the CPU count) for the local executor, or each
alive node's slots for the Ray executor (``--ray``), and which running trial holds each."""

from __future__ import annotations

import socket
from typing import Any, Dict, List, Optional, Tuple

import click

from determined_lite.cli._common import AliasedGroup, Failed, echo_json, open_store
from determined_lite.cli._table import Fit, echo_rows
from determined_lite.store import ExperimentState, TrialState

SLOT_FIT = Fit(drop=("Trial",))


@click.group("slot", cls=AliasedGroup, aliases={"ls": "list"})
def slot() -> None:
    """Show the slots trials run on."""


def _busy_devices() -> Dict[Tuple[str, str], int]:
    """(host, device) -> trial id, for the latest run of every ACTIVE trial of a running
    experiment (the store records where each run was placed)."""
    store = open_store()
    busy: Dict[Tuple[str, str], int] = {}
    for exp in store.experiments.list(with_config=False):
        if exp["state"] != ExperimentState.ACTIVE or not exp["running"]:
            continue
        described = store.experiments.describe(exp["id"], metrics=False) or {}
        for trial in described.get("trials", []):
            runs = trial.get("runs") or []
            if trial["state"] != TrialState.ACTIVE or not runs:
                continue
            for device in runs[-1].get("devices") or []:
                busy[(str(runs[-1]["host"]), str(device))] = trial["id"]
    return busy


def _local_rows() -> List[Tuple[Any, ...]]:
    from determined_lite.launch._local import cpu_slots, visible_devices

    host = socket.gethostname()
    devices = visible_devices()
    if devices:
        busy = _busy_devices()
        return [(host, i, "cuda", d, busy.get((host, d), "")) for i, d in enumerate(devices)]
    return [(host, i, "cpu", "", "") for i in range(cpu_slots())]


def _ray_rows(address: Optional[str]) -> List[Tuple[Any, ...]]:
    from determined_lite.launch._ray_cluster import RayOptions, alive_nodes, connect, connect_failure

    options = RayOptions(address=address)
    try:
        connect(options)
    except ImportError:
        raise Failed("--ray needs Ray: pip install 'determined-lite[ray]'") from None
    except Exception as e:  # noqa: BLE001 -- Ray's own errors vary; one line says it
        raise Failed(f"cannot connect to a Ray cluster: {connect_failure(e)}") from None
    rows: List[Tuple[Any, ...]] = []
    for node in sorted(alive_nodes(), key=lambda n: n.get("NodeManagerAddress", "")):
        have = node.get("Resources") or {}
        gpus, cpus = int(have.get("GPU", 0)), int(have.get("CPU", 0))
        kind, count = ("cuda", gpus) if gpus else ("cpu", cpus)
        name = f"{node.get('NodeManagerAddress', '')} ({str(node.get('NodeID', ''))[:8]})"
        rows.extend((name, i, kind, "", "") for i in range(count))
    return rows


@slot.command("list", short_help="List the slots trials run on.")
@click.option("--ray", "use_ray", is_flag=True, help="The Ray cluster's slots (resources.executor: ray).")
@click.option("--address", default=None, help="The Ray cluster's address (default: $RAY_ADDRESS, else auto).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
def list_slots(use_ray: bool, address: Optional[str], as_json: bool, as_csv: bool) -> None:
    """List the slots trials are given: one per GPU (or per core when there is none) of this
    machine, or with --ray one per GPU (else per CPU) of each alive Ray node; a slot held by a
    running trial names it."""
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    if address is not None and not use_ray:
        raise click.UsageError("--address is for --ray")
    rows = _ray_rows(address) if use_ray else _local_rows()
    headers = ["Node", "Slot ID", "Type", "Device", "Trial"]
    if as_json:
        echo_json([dict(zip(headers, row)) for row in rows])
        return
    echo_rows(headers, rows, SLOT_FIT, as_csv)
