"""Where and how a trial's workers run: executors place a trial run's gang of slots
(``_executor.py``: the interface; ``_local.py``: this machine's GPUs or cores), and the engine's
launcher starts its workers there (one process, ``horovodrun`` or ``torch.distributed.run``)."""

from determined_lite.launch._executor import Executor, Placement, TrialRun, make_executor
from determined_lite.launch._failures import worker_command
from determined_lite.launch._launcher import TrialProcess, launch, run_trial
from determined_lite.runtime._spec import BACKENDS, WorkerResult, WorkerSpec, WorkerStatus

__all__ = [
    "BACKENDS",
    "Executor",
    "Placement",
    "TrialProcess",
    "TrialRun",
    "WorkerResult",
    "WorkerSpec",
    "WorkerStatus",
    "launch",
    "make_executor",
    "run_trial",
    "worker_command",
]
