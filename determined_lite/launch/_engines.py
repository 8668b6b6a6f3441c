"""The launcher half of each engine's record (``config._plugins.ENGINES``): its launcher module
defines ``ENGINE``, an :class:`Engine`, imported when the engine is used. Every executor reaches
an engine only through this interface: the local executor runs the engine's own launcher
(:meth:`Engine.command`); executors that place ranks themselves (Ray) have rank 0's slot host the
engine's rendezvous on its node (:meth:`Engine.rendezvous`, a listener that process binds
itself and publishes) and give each rank :meth:`Engine.rank_env`, with each node's interface
variables read on that node (:meth:`Engine.node_env`). ``experiment create`` asks
:func:`engine_problem` before anything is recorded (exit 2 with the reason); the engine's
launcher asks again."""

from __future__ import annotations

import abc
import importlib
from types import ModuleType
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from determined_lite.config._plugins import ENGINES, SINGLE_ENGINE
from determined_lite.launch._failures import worker_command
from determined_lite.launch._hosts import interface_of
from determined_lite.launch._slots import Slot
from determined_lite.runtime._spec import WorkerSpec


class Rendezvous(abc.ABC):
    """Where a gang's ranks meet, hosted by the process that bound it (rank 0's slot)."""

    @abc.abstractmethod
    def env(self) -> Dict[str, str]:
        """What every rank needs to find it (address, the port bound): published to the ranks."""

    def port(self) -> Optional[int]:
        """The port it listens on (None: nothing listens)."""
        return None

    def close(self) -> None:
        """Stop listening (the gang ended)."""


class NoRendezvous(Rendezvous):
    """An engine whose ranks meet nowhere (one plain process)."""

    def env(self) -> Dict[str, str]:
        return {}


class Engine(abc.ABC):
    """One distributed engine's plug-in, the same for every executor."""

    # Variables naming the network interface its workers use: read on each node (the node's own
    # value, else the interface holding the node's address), never the driver's.
    interface_env: Tuple[str, ...] = ()

    @abc.abstractmethod
    def problem(self, slots: int) -> Optional[str]:
        """Why ``slots`` (> 1) workers cannot start here, or None."""

    @abc.abstractmethod
    def command(
        self, spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
    ) -> Tuple[List[str], Dict[str, str]]:
        """``(argv, env)`` of the engine's own launcher starting ``spec``'s workers (local)."""

    @abc.abstractmethod
    def rendezvous(self, address: str, slots: Sequence[Slot]) -> Rendezvous:
        """The gang's rendezvous, started by rank 0's slot process on its node at ``address``
        (bound there, to a port of its own choosing)."""

    @abc.abstractmethod
    def rank_env(
        self, spec: WorkerSpec, slots: Sequence[Slot], rank: int, meet: Mapping[str, str]
    ) -> Dict[str, str]:
        """``rank``'s environment, ``meet`` being what the rendezvous published."""

    def node_env(self, address: str, node: Mapping[str, str]) -> Dict[str, str]:
        """The interface variables of a node whose address is ``address`` and whose environment
        is ``node``: the node's own values, else the interface that holds ``address``."""
        iface = interface_of(address)
        env: Dict[str, str] = {}
        for name in self.interface_env:
            value = node.get(name) or iface
            if value:
                env[name] = value
        return env


class SingleEngine(Engine):
    """One plain worker process: no rendezvous, no rank environment."""

    def problem(self, slots: int) -> Optional[str]:
        return None

    def command(
        self, spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
    ) -> Tuple[List[str], Dict[str, str]]:
        return worker_command(spec_path), {}

    def rendezvous(self, address: str, slots: Sequence[Slot]) -> Rendezvous:
        return NoRendezvous()

    def rank_env(
        self, spec: WorkerSpec, slots: Sequence[Slot], rank: int, meet: Mapping[str, str]
    ) -> Dict[str, str]:
        return {}


SINGLE = SingleEngine()


def launcher(backend: str) -> ModuleType:
    """The launcher module of ``backend`` (a name in ``ENGINES``)."""
    try:
        return importlib.import_module(ENGINES[backend].launcher_module)
    except KeyError:
        expected = ", ".join(ENGINES)
        raise ValueError(f"unknown distributed backend {backend!r}; expected one of {expected}") from None


def engine(backend: str) -> Engine:
    """The plug-in of ``backend`` (a name in ``ENGINES``, or the single-process engine)."""
    if backend == SINGLE_ENGINE:
        return SINGLE
    plugin: Engine = launcher(backend).ENGINE
    return plugin


def engine_problem(backend: str, slots: int) -> Optional[str]:
    """Why ``slots`` workers of ``backend`` cannot start here, or None when they can.

    One slot runs in a plain process whatever the backend, so only multi-slot runs need the
    engine.
    """
    if slots <= 1:
        return None
    return engine(backend).problem(slots)


def engine_command(
    spec: WorkerSpec, spec_path: str, hosts: Optional[Sequence[str]]
) -> Tuple[List[str], Dict[str, str]]:
    """``(argv, extra env)`` that starts ``spec``'s workers: one plain worker process for the
    ``single`` backend (one slot without hosts, or a script that names no Determined launcher and
    sees all its slots), else the engine's launcher."""
    if spec.slots == 1 and not hosts:
        return SINGLE.command(spec, spec_path, hosts)
    return engine(spec.backend).command(spec, spec_path, hosts)
