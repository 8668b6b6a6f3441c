"""The registries of det-lite's plug-ins: distributed engines and executors, one line each.

They live at the bottom (the config layer) because the config accepts exactly their names
(``resources.distributed_backend``, ``resources.executor``); the layers above resolve a name to
its code through the module named here, imported on first use (so an engine or executor that
is not used costs nothing, and an optional dependency such as Ray is imported only by the
executor that needs it):

- an engine's record names its distributed context module (``distributed/``: defines the
  ``DistributedContext`` subclass registered under the engine's name), its launcher module
  (``launch/``: defines ``ENGINE``, its ``launch._engines.Engine`` plug-in, which every executor
  calls: its own launcher, rank environments, the rendezvous rank 0 hosts), Determined's
  launcher module that implies it, and how a stop reaches its workers;
- an executor's entry names the ``launch/`` module whose ``EXECUTOR`` class places and runs a
  trial's gang of slots (``launch/_executor.py`` is the interface).

Adding an engine: its context module, its launcher module and one line in :data:`ENGINES`.
Adding an executor: its module and one line in :data:`EXECUTORS`.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Final, FrozenSet, Mapping, Tuple

from determined_lite.config._errors import describe


@dataclasses.dataclass(frozen=True)
class EngineRecord:
    """One distributed engine (``resources.distributed_backend``) and where its parts live."""

    name: str
    context_module: str  # distributed/ module whose DistributedContext registers ``name``
    launcher_module: str  # launch/ module: ENGINE (an Engine), command(...), problem(slots)
    tool: str  # the engine's own launcher, in messages
    determined_launcher: str  # Determined's ``python3 -m <this>`` entrypoint form implying it
    determined_flags: FrozenSet[str]  # its flags det-lite accepts and ignores
    # Stop-signal policy: the signals that say a worker was stopped by its launcher (after a
    # peer failed, or on request), so its end is not the trial's error; and whether such ends
    # are ordered after every other end when the failure that stopped the trial is chosen
    # (the engine's launcher reports no times) rather than by time.
    stop_signals: Tuple[str, ...]
    stopped_last: bool


ENGINES: Final[Dict[str, EngineRecord]] = {
    "horovod": EngineRecord(
        "horovod",
        "determined_lite.distributed._horovod",
        "determined_lite.launch._horovodrun",
        "horovodrun",
        "determined.launch.horovod",
        frozenset({"--autohorovod"}),
        ("SIGTERM", "SIGINT"),
        True,
    ),
    "torch": EngineRecord(
        "torch",
        "determined_lite.distributed._torch",
        "determined_lite.launch._torchrun",
        "torchrun",
        "determined.launch.torch_distributed",
        frozenset(),
        ("SIGTERM",),
        False,
    ),
}
DEFAULT_ENGINE: Final = "horovod"  # Determined's default distributed engine
# The engine of a one-slot trial without hosts: one plain process (not configurable).
SINGLE_ENGINE: Final = "single"
SINGLE_CONTEXT_MODULE: Final = "determined_lite.distributed._single"

# executor name -> the launch/ module whose ``EXECUTOR`` class runs trials there.
EXECUTORS: Final[Dict[str, str]] = {
    "local": "determined_lite.launch._local",
    "ray": "determined_lite.launch._ray",
}
DEFAULT_EXECUTOR: Final = "local"


def check_name(name: object, names: Mapping[str, object]) -> str:
    """``name`` when it is registered in ``names``, else ValueError listing the choices (worded
    as the config's other choices: ``expected 'horovod' or 'torch', got 'nccl'``)."""
    if isinstance(name, str) and name in names:
        return name
    choices = [repr(n) for n in names]
    expected = " or ".join(choices) if len(choices) < 3 else f"{', '.join(choices[:-1])} or {choices[-1]}"
    raise ValueError(f"expected {expected}, got {describe(name)}")
