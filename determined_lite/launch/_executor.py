"""Where a trial runs: the executor interface the experiment runner calls.

An executor owns a pool of slots (this machine's GPUs or cores; a cluster's). For each trial
run the runner asks it to place a gang of ``slots_per_trial`` slots and start the trial's
workers there (:meth:`Executor.start`); the started run (:class:`TrialRun`) streams the workers'
output lines to ``on_output``, is polled, waited on or stopped, and reports the worker's result.
A run's slots go back to the pool when it ends (``wait`` or ``stop``), whatever the ending (a
crash included). Before anything is recorded, ``experiment create`` asks
:meth:`Executor.problem` whether the config can run at all (e.g. more slots per trial than the
executor will ever have); while running, the runner starts a trial only when
:meth:`Executor.capacity` (free slots now) holds its gang and ``max_concurrent_trials`` allows.

Executors are registered by name in ``config._plugins.EXECUTORS`` (``resources.executor``);
:func:`make_executor` builds the one a config names. Writing one: subclass :class:`Executor`,
name the class ``EXECUTOR`` in its module, add the module to the registry.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Type

from determined_lite.config._plugins import DEFAULT_EXECUTOR, EXECUTORS
from determined_lite.launch._failures import STOP_GRACE_S
from determined_lite.runtime._spec import WorkerResult, WorkerSpec

OutputFn = Callable[[str], None]
EndFn = Callable[[], None]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one trial run's gang of slots lies (stored with the run, shown by ``describe``).

    ``devices``: the accelerator ids the gang holds on ``host`` (rank r of the host uses the
    r-th; the workers see them as ``CUDA_VISIBLE_DEVICES``); empty when a slot is a CPU.
    """

    host: str
    slots: int
    devices: tuple[str, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        return {"host": self.host, "slots": self.slots, "devices": list(self.devices)}

    def describe(self) -> str:
        """``host`` with its devices, in words: ``box gpu 0,1`` or ``box 2 cpu slots``."""
        if self.devices:
            return f"{self.host} gpu {','.join(self.devices)}"
        return f"{self.host} {self.slots} cpu slot{'s' if self.slots != 1 else ''}"


class TrialRun(abc.ABC):
    """The running workers of one trial run on their placed gang."""

    placement: Placement
    spec: WorkerSpec

    @abc.abstractmethod
    def poll(self) -> Optional[int]:
        """The run's exit status once it ended (0: every worker succeeded), else None."""

    @abc.abstractmethod
    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the end (``subprocess.TimeoutExpired`` after ``timeout`` seconds); its
        output is all delivered and its slots are free when this returns."""

    @abc.abstractmethod
    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """Stop every worker (a stop signal, then a kill after ``grace`` s); the exit status."""

    def result(self, code: int) -> WorkerResult:
        """The chief's result after the run ended with ``code`` (an error result when it wrote
        none). Executors whose chief writes elsewhere bring it to ``spec.result_path`` first."""
        return WorkerResult.after_exit(self.spec.result_path, code)


class Executor(abc.ABC):
    """A pool of slots that trial runs are placed on (one per experiment runner)."""

    name: ClassVar[str]

    def __init__(self, config: Mapping[str, Any]) -> None:
        """``config``: the experiment's validated config (``to_dict()``)."""
        self.config = config

    @classmethod
    @abc.abstractmethod
    def problem(cls, config: Mapping[str, Any]) -> Optional[str]:
        """Why ``config``'s trials can never run on this executor (one line naming the numbers,
        e.g. ``slots_per_trial`` and the slots there are), or None. Asked by ``experiment
        create`` before anything is recorded."""

    @abc.abstractmethod
    def total(self) -> int:
        """All the slots of the executor (free or not)."""

    @abc.abstractmethod
    def capacity(self) -> int:
        """The slots free now: a trial starts when its ``slots_per_trial`` fit in them."""

    @abc.abstractmethod
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
        """Place a gang of ``spec.slots`` slots and start the trial's workers on it.

        ``spec`` is written to ``spec_path`` for the workers; ``env`` is added to their
        environment; ``on_output`` gets every output line (rank-prefixed by the workers) from a
        reader thread; ``pass_fds``: file descriptors the trial's first process inherits (the
        runner lock); ``on_end``: called once, from another thread, when the run has ended
        (its :meth:`TrialRun.poll` then says so: the runner's loop waits for it instead of
        polling; an executor that never calls it is polled). Called only when :meth:`capacity`
        holds the gang (else ``RuntimeError``).
        """

    def chief_is_local(self) -> bool:
        """Whether every run's chief is a process on the runner's machine: it can then wake the
        runner's loop through a FIFO (``spec.wake_path``, ``experiment/_wakeup.py``); else the
        runner polls for what the chief writes. False by default."""
        return False

    def workers_fetch_checkpoints(self) -> bool:
        """Whether a run's workers download the cloud checkpoint they resume from themselves, on
        their own nodes (the runner then passes its registered path and downloads nothing);
        else the runner puts a local copy where the spec says. False by default."""
        return False

    def prestart(self, context_dir: str, env: Dict[str, str]) -> None:
        """Start, in the background, what the first trial run would otherwise wait for (the
        local executor's fork server); the runner calls it once, first. Nothing by default."""

    def close(self) -> None:
        """Release what the executor holds (connections, actors); the runner calls it last."""


def executor_class(name: str) -> Type[Executor]:
    """The executor class registered as ``name`` (its module imported now)."""
    try:
        module = EXECUTORS[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r}; expected one of {', '.join(EXECUTORS)}") from None
    cls: Type[Executor] = importlib.import_module(module).EXECUTOR
    return cls


def executor_name(config: Mapping[str, Any]) -> str:
    """``resources.executor`` of a validated config (``local`` when absent)."""
    return str((config.get("resources") or {}).get("executor") or DEFAULT_EXECUTOR)


def make_executor(config: Mapping[str, Any]) -> Executor:
    """The executor ``config`` names in ``resources.executor``."""
    return executor_class(executor_name(config))(config)


def executor_problem(config: Mapping[str, Any]) -> Optional[str]:
    """Why ``config`` cannot run on its executor, or None (``experiment create`` asks)."""
    return executor_class(executor_name(config)).problem(config)


__all__: List[str] = [
    "EndFn",
    "Executor",
    "OutputFn",
    "Placement",
    "TrialRun",
    "executor_class",
    "executor_problem",
    "make_executor",
]
