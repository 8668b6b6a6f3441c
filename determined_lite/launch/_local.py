"""The ``local`` executor: trials run on this machine, a slot per GPU (else per core).

As Determined's agent does: when CUDA devices are visible a slot is a GPU, and each trial run
gets its own devices (``CUDA_VISIBLE_DEVICES`` for its workers, local rank r on the r-th), which
go back to the pool when the run ends, however it ends. Without GPUs a slot is a core
(``$DET_LITE_SLOTS`` overrides the count). The devices are, first found:
``$DET_LITE_DEVICES`` (comma-separated ids; empty: none, which simulates a machine without
GPUs), ``$CUDA_VISIBLE_DEVICES`` (what this process may use), the GPUs the NVIDIA driver lists
in ``/proc/driver/nvidia/gpus`` (no CUDA initialised, no nvidia-smi).

With ``resources.hosts`` the engine's launcher places the workers on the listed hosts
(passwordless ssh): this executor only bounds how many such trials run at once by this
machine's slots, and a trial larger than them runs alone.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from determined_lite.config import ExperimentSettings
from determined_lite.launch._engines import engine_problem
from determined_lite.launch._executor import EndFn, Executor, OutputFn, Placement, TrialRun
from determined_lite.launch._failures import STOP_GRACE_S
from determined_lite.launch._launcher import TrialProcess, launch, prestart
from determined_lite.runtime._spec import WorkerSpec

DEVICES_ENV = "DET_LITE_DEVICES"
SLOTS_ENV = "DET_LITE_SLOTS"
_NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def _id_list(value: str) -> Tuple[str, ...]:
    ids: List[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):  # CUDA stops at the first invalid id
            break
        ids.append(entry)
    return tuple(ids)


def visible_devices() -> Tuple[str, ...]:
    """The GPU ids trials may be given (empty: slots are cores); see the module's docstring."""
    for name in (DEVICES_ENV, "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value is not None:
            return _id_list(value)
    try:
        count = len(os.listdir(_NVIDIA_GPUS))
    except OSError:
        return ()
    return tuple(str(i) for i in range(count))


def cpu_slots() -> int:
    """Slots when a slot is a core: ``$DET_LITE_SLOTS``, else the CPU count."""
    return max(1, int(os.environ.get(SLOTS_ENV) or os.cpu_count() or 1))


def slots_in_words(devices: Sequence[str], slots: int) -> str:
    """What this machine's slots are, in words (for the create-time check and warnings)."""
    if devices:
        return f"{len(devices)} (GPUs {','.join(devices)}; ${DEVICES_ENV} to choose them)"
    return f"{slots} (${SLOTS_ENV}, else the cores)"


class LocalRun(TrialRun):
    """One trial run's process group on this machine; its devices go back when it ends."""

    def __init__(self, process: TrialProcess, spec: WorkerSpec, placement: Placement, release: Any) -> None:
        self.process = process
        self.spec = spec
        self.placement = placement
        self._release = release

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> Optional[int]:
        return self.process.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self.process.wait(timeout)
        self._release(self.placement)
        return code

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        code = self.process.stop(grace)
        self._release(self.placement)
        return code


class LocalExecutor(Executor):
    """This machine's slots (GPUs, else cores) as a pool; see the module's docstring."""

    name = "local"

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        resources = config.get("resources") or {}
        self.slots_per_trial = int(resources.get("slots_per_trial") or 1)
        self.hosts: List[str] = list(resources.get("hosts") or [])
        self.devices = () if self.hosts else visible_devices()
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._free: List[str] = list(self.devices)  # free device ids, in the machine's order
        self._used = 0  # slots held by running trials
        self._held: Dict[int, Placement] = {}  # id(placement) -> placement, until released

    @classmethod
    def problem(cls, config: Mapping[str, Any]) -> Optional[str]:
        resources = config.get("resources") or {}
        slots = int(resources.get("slots_per_trial") or 1)
        if not resources.get("hosts"):
            devices = visible_devices()
            have = len(devices) or cpu_slots()
            if slots > have:
                return (
                    f"resources.slots_per_trial is {slots} but this machine has "
                    f"{slots_in_words(devices, have)} slots; lower slots_per_trial or list "
                    "machines in resources.hosts"
                )
        if ExperimentSettings.from_config(config).script_once:
            return None  # one process that sees all its slots: no engine starts
        return engine_problem(str(resources.get("distributed_backend") or ""), slots)

    def total(self) -> int:
        return len(self.devices) or cpu_slots()

    def chief_is_local(self) -> bool:
        return not self.hosts  # with resources.hosts, rank 0 may be on another machine

    def capacity(self) -> int:
        with self._lock:
            return self._capacity()

    def _capacity(self) -> int:
        if not self._used:
            # A trial larger than the machine runs alone: with resources.hosts (its workers
            # are elsewhere), or for an experiment created before $DET_LITE_SLOTS changed.
            return max(self.total(), self.slots_per_trial)
        return max(0, self.total() - self._used)

    def _place(self, slots: int) -> Placement:
        with self._lock:
            if slots > self._capacity():
                raise RuntimeError(f"no room for {slots} slots: {self._capacity()} free")
            self._used += slots
            devices: Tuple[str, ...] = ()
            if self.devices:
                devices, self._free = tuple(self._free[:slots]), self._free[slots:]
            placement = Placement(host=self.host, slots=slots, devices=devices)
            self._held[id(placement)] = placement
            return placement

    def _release(self, placement: Placement) -> None:
        with self._lock:
            if self._held.pop(id(placement), None) is None:
                return  # released already
            self._used -= placement.slots
            order = {d: i for i, d in enumerate(self.devices)}
            self._free = sorted(self._free + list(placement.devices), key=order.__getitem__)

    def prestart(self, context_dir: str, env: Dict[str, str]) -> None:
        # Only plain 1-slot workers on cores are forked (launch/_forkserver.py).
        if self.slots_per_trial == 1 and not self.hosts and not self.devices:
            prestart(context_dir, env)

    def start(
        self,
        spec: WorkerSpec,
        spec_path: str,
        *,
        on_output: OutputFn,
        env: Dict[str, str],
        pass_fds: Sequence[int] = (),
        on_end: Optional[EndFn] = None,
    ) -> TrialRun:
        placement = self._place(spec.slots)
        run_env = dict(env)
        if placement.devices:
            run_env["CUDA_VISIBLE_DEVICES"] = ",".join(placement.devices)
        try:
            process = launch(
                spec,
                spec_path,
                hosts=self.hosts or None,
                on_output=on_output,
                env=run_env,
                pass_fds=pass_fds,
                on_end=on_end,
            )
        except BaseException:
            self._release(placement)
            raise
        return LocalRun(process, spec, placement, self._release)


EXECUTOR = LocalExecutor
