"""``det.get_cluster_info()``: what a trial's process knows about the trial it runs.

The launcher puts ``$DET_LITE_TRIAL_SPEC`` (the path of the trial's private ``spec.json``) in
every worker's environment; :func:`get_cluster_info` reads it into Determined's ``ClusterInfo``
shape (``trial.hparams``, ``trial.trial_id``, ``latest_checkpoint``, ``container_rank``, ...).
Without it (a plain ``python train.py``) it is None, as Determined's is off-cluster.

The worker that runs a script also registers its live trial (:func:`set_active_trial`): the
distributed context it joined and the store writers, which ``det.pytorch.init()``,
``Trainer.fit`` and ``det.core.init()`` pick up. Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Callable, Dict, List, Optional

SPEC_ENV = "DET_LITE_TRIAL_SPEC"
# ``host:port`` of the TCPStore that workers a trial's script starts itself join
# (``det.core.DistributedContext(rank=...)``: distributed/_ranks.py, launch/_script_workers.py).
CORE_STORE_ENV = "DET_LITE_CORE_STORE"


class ClusterTrialInfo:
    """Determined's ``det.TrialInfo``: the trial's ids, seed, hyperparameters and config."""

    def __init__(
        self,
        trial_id: int,
        experiment_id: int,
        trial_seed: int,
        hparams: Dict[str, Any],
        config: Dict[str, Any],
        steps_completed: int,
    ) -> None:
        self.trial_id = trial_id
        self.experiment_id = experiment_id
        self.trial_seed = trial_seed
        self.hparams = hparams
        self._config = config
        self._steps_completed = steps_completed
        self._trial_run_id = 1
        self._debug = False
        self._inter_node_network_interface: Optional[str] = None

    @property
    def user_data(self) -> Dict[str, Any]:
        """The experiment config's ``data`` section."""
        return dict(self._config.get("data") or {})

    def __repr__(self) -> str:
        return f"TrialInfo(trial_id={self.trial_id}, experiment_id={self.experiment_id})"


class ClusterInfo:
    """Determined's ``det.ClusterInfo`` for a det-lite trial (one machine: no master, no agents).

    det-lite's own: ``spec`` (the worker spec it was read from, a ``runtime._spec.WorkerSpec``).
    """

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        eid, tid = spec.experiment_id, spec.trial_id
        self.master_url = ""  # no master: the store is the experiment's record
        self.cluster_id = "det-lite"
        self.agent_id = socket.gethostname()
        self.slot_ids: List[int] = list(range(spec.slots))
        self.task_id = f"{eid}.{tid}"
        self.allocation_id = f"{eid}.{tid}.{os.getppid()}"
        self.session_token = ""
        self.task_type = "TRIAL"
        self.master_cert_name: Optional[str] = None
        self.master_cert_file: Optional[str] = None
        steps = checkpoint_batches(spec.latest_checkpoint)
        self._trial = ClusterTrialInfo(tid, eid, spec.trial_seed, spec.hparams, spec.exp_conf, steps)

    @property
    def latest_checkpoint(self) -> Optional[str]:
        """The uuid of the checkpoint this run of the trial resumes from (None: a fresh start)."""
        path = self.spec.latest_checkpoint
        return os.path.basename(os.path.normpath(path)) if path else None

    @property
    def trial(self) -> ClusterTrialInfo:
        return self._trial

    @property
    def _trial_info(self) -> ClusterTrialInfo:
        """Determined's private name of ``trial`` (its core_v2 examples read it)."""
        return self._trial

    @property
    def user_data(self) -> Dict[str, Any]:
        return self._trial.user_data

    @property
    def container_addrs(self) -> List[str]:
        return [socket.gethostname()]

    @property
    def container_slot_counts(self) -> List[int]:
        return [self.spec.slots]

    @property
    def container_rank(self) -> int:
        """This machine's rank among the trial's hosts (0 on one machine)."""
        for name in ("GROUP_RANK", "HOROVOD_CROSS_RANK"):  # torchrun, horovodrun
            value = os.environ.get(name)
            if value and value.isdigit():
                return int(value)
        return 0

    @property
    def gpu_uuids(self) -> List[str]:
        return []

    def __repr__(self) -> str:
        return f"ClusterInfo(task_id={self.task_id!r}, latest_checkpoint={self.latest_checkpoint!r})"


def checkpoint_batches(path: Optional[str]) -> int:
    """The batches (steps completed) a checkpoint directory was written at; 0 for none."""
    if not path:
        return 0
    try:
        with open(os.path.join(path, "metadata.json")) as f:
            return int(json.load(f).get("total_batches") or 0)
    except (OSError, ValueError, TypeError):
        return 0


_cache: Dict[str, ClusterInfo] = {}


def get_cluster_info() -> Optional[ClusterInfo]:
    """The trial this process runs for, or None outside a det-lite trial (its spec is read once:
    a process runs one trial)."""
    path = os.environ.get(SPEC_ENV)
    if not path:
        return None
    if path not in _cache:
        from determined_lite.runtime._spec import WorkerSpec

        _cache[path] = ClusterInfo(WorkerSpec.load(path))
    return _cache[path]


_active: Optional[Any] = None


def set_active_trial(trial: Optional[Any]) -> None:
    """Register the script trial this worker runs (``launch._script.ScriptTrial``), or clear it."""
    global _active
    _active = trial


def active_trial() -> Optional[Any]:
    """The script trial this worker runs, or None (a class trial, plain Python)."""
    return _active


_adopter: Optional[Callable[[Any], Any]] = None


def set_trial_adopter(adopter: Optional[Callable[[Any], Any]]) -> None:
    """Register how ``det.core.init(distributed=...)`` adopts the trial in a process that a
    trial's script started itself (``launch._script.adopt``; the ``determined`` alias registers it)."""
    global _adopter
    _adopter = adopter


def adopt_trial(distributed: Any) -> Optional[Any]:
    """The live trial of this process, adopted when none is registered yet (None: not a
    process of a trial, or no adopter registered)."""
    if _active is None and _adopter is not None:
        _adopter(distributed)
    return _active
