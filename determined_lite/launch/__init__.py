"""Start a trial's workers: one process, ``horovodrun`` or ``torch.distributed.run``."""

from determined_lite.launch._failures import worker_command
from determined_lite.launch._launcher import TrialProcess, launch, run_trial
from determined_lite.runtime._spec import BACKENDS, WorkerResult, WorkerSpec, WorkerStatus

__all__ = [
    "BACKENDS",
    "TrialProcess",
    "WorkerResult",
    "WorkerSpec",
    "WorkerStatus",
    "launch",
    "run_trial",
    "worker_command",
]
