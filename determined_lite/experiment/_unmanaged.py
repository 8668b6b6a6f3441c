"""An unmanaged run: Determined's ``core_v2`` in a plain ``python3 script.py`` (no det-lite runner).

The script is the experiment's driver and only writer: an experiment of kind ``unmanaged``
(the config ``core_v2.Config`` describes, validated as ``experiment create`` does) with one
trial written through the same ``launch._script.ScriptTrial`` a managed script uses; its pid is
recorded, ``pause``/``kill`` are requests ``should_preempt()`` answers, and closing records the
end. ``external_experiment_id`` / ``external_trial_id`` add a trial to, or resume a trial of, an
experiment recorded with the same ids. Other workers get the ids by broadcast. The contract:
docs/design.md, "An unmanaged run".
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

from determined_lite.config import TrainingSettings
from determined_lite.config._plugins import SINGLE_ENGINE
from determined_lite.launch._script import ScriptTrial
from determined_lite.reporting._local import LocalRun
from determined_lite.reporting._retention import RetentionPolicy
from determined_lite.runtime._cluster import ClusterInfo
from determined_lite.runtime._spec import BACKENDS, WorkerSpec
from determined_lite.store import ExperimentKind, ExperimentState, Store, TrialState
from determined_lite.store._paths import checkpoint_root, experiment_dir, make_private_dirs
from determined_lite.tensorboard import trial_tensorboard_path

logger = logging.getLogger("determined_lite")

EXTERNAL_ID_KEY = "external_experiment_id"  # in the recorded config, as Determined's experiment has it
UNMANAGED_REQUEST_ID = "unmanaged"
_PLACEHOLDER_ENTRYPOINT = "python3 unmanaged.py"  # validated in place of the command line


class UnmanagedRunError(RuntimeError):
    """An unmanaged run det-lite cannot record or resume (one line)."""


class Recorded(NamedTuple):
    """What the chief recorded (or found), broadcast to the other workers."""

    store_path: str
    experiment_id: int
    trial_id: int
    config: Dict[str, Any]  # as stored
    latest_checkpoint: Optional[str]  # the resumed trial's newest checkpoint directory


def command_line() -> str:
    """This process's command line, as the recorded config's ``entrypoint`` (a record only)."""
    argv = [a for a in sys.argv if a] or ["<interactive>"]
    return "python3 " + shlex.join(argv)


def _validated(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` validated as ``experiment create`` validates a file (ConfigError: one line)."""
    from determined_lite.searcher import validate_config

    written = {k: v for k, v in config.items() if v is not None}
    written["entrypoint"] = _PLACEHOLDER_ENTRYPOINT
    validated = validate_config(written, source="core_v2.Config").to_dict()
    validated["entrypoint"] = command_line()
    return validated


def _find_external(store: Store, external_id: str) -> Optional[Dict[str, Any]]:
    for exp in store.experiments.list():
        if exp.get("kind") == ExperimentKind.UNMANAGED and exp["config"].get(EXTERNAL_ID_KEY) == external_id:
            return exp
    return None


def _experiment(store: Store, config: Dict[str, Any], labels: Any, external_id: Optional[str]) -> int:
    """The experiment to record the run in: the one of ``external_id``, else a new one."""
    from determined_lite.storage import checkpoint_storage, redact, save_secrets

    found = _find_external(store, external_id) if external_id is not None else None
    if found is not None:
        if found["running"]:
            raise UnmanagedRunError(
                f"experiment {found['id']} (external id {external_id!r}) is run by process "
                f"{found['pid']}; an experiment has one writer"
            )
        store.experiments.set_running(found["id"], os.getpid())
        return int(found["id"])
    checkpoint_storage(config).probe()
    stored, secrets = redact(config)
    if external_id is not None:
        stored[EXTERNAL_ID_KEY] = external_id
    eid = store.experiments.create(
        stored, os.getcwd(), None, stored.get("name"), pid=os.getpid(), kind=ExperimentKind.UNMANAGED
    )
    save_secrets(eid, secrets)
    if labels:
        store.experiments.set_annotations(eid, labels=list(labels))
    return eid


def _trial(
    store: Store, eid: int, hparams: Dict[str, Any], seed: int, external_trial_id: Optional[str]
) -> Tuple[int, Optional[str]]:
    """The trial (a new one, or the one of ``external_trial_id``) and its latest checkpoint's path."""
    request_id = f"external:{external_trial_id}" if external_trial_id is not None else UNMANAGED_REQUEST_ID
    if external_trial_id is not None:
        for trial in store.trials.list(eid):
            if trial["request_id"] == request_id:
                store.trials.update(trial["id"], state=TrialState.ACTIVE, started_at=time.time())
                checkpoints = store.checkpoints.list(trial_id=trial["id"])
                latest = max(checkpoints, key=lambda c: c["total_batches"]) if checkpoints else None
                return int(trial["id"]), latest["path"] if latest else None
    tid = store.trials.create(eid, request_id, hparams, seed)
    store.trials.update(tid, started_at=time.time())
    make_private_dirs(os.path.join(experiment_dir(eid), f"trial_{tid}"))  # the progress file's
    return tid, None


def _record(
    config: Dict[str, Any], hparams: Dict[str, Any], labels: Any, external: Tuple[Any, Any]
) -> Recorded:
    """Record (or find) the experiment and trial."""
    external_experiment_id, external_trial_id = external
    if external_trial_id is not None and external_experiment_id is None:
        raise UnmanagedRunError("core_v2.Config: external_trial_id needs external_experiment_id too")
    validated = _validated(config)
    store = Store()
    eid = _experiment(store, validated, labels, external_experiment_id)
    try:
        stored = (store.experiments.get(eid) or {})["config"]
        seed = int(stored["reproducibility"]["experiment_seed"])
        tid, latest = _trial(store, eid, hparams, seed, external_trial_id)
    except BaseException:
        store.experiments.set_pid(eid, None)
        raise
    return Recorded(store.path, eid, tid, stored, latest)


class UnmanagedRun:
    """One unmanaged run of the script: its ``ScriptTrial`` (what the Core API contexts report
    to) and its ``ClusterInfo`` (``core_v2.info``); it is also the context's ``_ending``
    (``start``, ``close``)."""

    def __init__(self, recorded: Recorded, hparams: Dict[str, Any], distributed: Any) -> None:
        store_path, eid, tid, config, latest = recorded
        settings = TrainingSettings.from_config(config)
        backend = getattr(distributed, "backend", SINGLE_ENGINE)
        self.spec = WorkerSpec(
            entrypoint=config["entrypoint"],
            context_dir=os.getcwd(),
            exp_conf=config,
            hparams=hparams,
            result_path=os.path.join(experiment_dir(eid), f"trial_{tid}", "result.json"),
            max_length={"batches": 0},  # no searcher length: the script trains to its own
            trial_seed=int(config["reproducibility"]["experiment_seed"]),
            settings=settings.to_json(),
            trial_id=tid,
            experiment_id=eid,
            latest_checkpoint=latest,
            store_path=store_path,
            checkpoint_root=checkpoint_root(config),
            tensorboard_path=trial_tensorboard_path(eid, tid),
            backend=backend if backend in BACKENDS else SINGLE_ENGINE,
            slots=distributed.size,
        )
        self.trial = ScriptTrial(self.spec, distributed, [])
        self.info = ClusterInfo(self.spec)
        self._is_chief = bool(distributed.is_chief)
        self._retention = RetentionPolicy.from_config(
            config, settings.searcher_metric, settings.smaller_is_better, experiment_id=eid
        )
        self._hook = _ExitHook()
        self.ended: Optional[ExperimentState] = None

    @classmethod
    def record(
        cls,
        config: Dict[str, Any],
        hparams: Optional[Dict[str, Any]],
        labels: Any,
        external: Tuple[Optional[str], Optional[str]],
        distributed: Any,
    ) -> "UnmanagedRun":
        """Record the run (the chief; every worker gets the ids) and return it."""
        recorded = _record(config, hparams or {}, labels, external) if distributed.is_chief else None
        if distributed.size > 1:
            recorded = distributed.broadcast(recorded)
        assert recorded is not None  # the chief's, broadcast
        run = cls(recorded, hparams or {}, distributed)
        if run._is_chief:
            logger.info(
                "unmanaged experiment %s, trial %s: det-lite experiment describe %s",
                run.spec.experiment_id,
                run.spec.trial_id,
                run.spec.experiment_id,
            )
        return run

    # --- the Core API context's _ending (Determined's _UnmanagedTrialHeartbeat) ---------------
    def start(self) -> None:
        self._hook.install()

    def close(self, error: Optional[BaseException]) -> None:
        """Record how the run ended (once; the chief)."""
        self._hook.uninstall()
        if self.ended is not None or not self._is_chief:
            return
        error = error or self._hook.error()
        if isinstance(error, KeyboardInterrupt):  # Determined: ERROR (LocalRun would pause it)
            error = RuntimeError("interrupted")
        store = Store(str(self.spec.store_path))
        eid, tid = int(self.spec.experiment_id or 0), int(self.spec.trial_id or 0)
        run = LocalRun(store, eid, tid, self._retention)
        self.ended = run.finish(self.trial.stopped, error)
        if error is not None:
            logger.error("unmanaged experiment %s reached an ERROR state: %s", run.experiment_id, error)


class _ExitHook:
    """What ends the script before ``close``: an uncaught exception (``sys.excepthook`` runs
    before ``atexit``) or ``sys.exit`` with a failure status (Determined's ``_ExitHook``)."""

    def __init__(self) -> None:
        self.exception: Optional[BaseException] = None
        self.exit_code: Any = None
        self._saved: Optional[Tuple[Any, Any]] = None

    def install(self) -> None:
        if self._saved is not None:
            return
        self._saved = (sys.excepthook, sys.exit)
        original_hook, original_exit = self._saved

        def excepthook(exc_type: Any, exc: Any, tb: Any) -> None:
            self.exception = exc
            original_hook(exc_type, exc, tb)

        def exit_(code: Any = 0) -> None:
            self.exit_code = code
            original_exit(code)

        sys.excepthook, sys.exit = excepthook, exit_  # type: ignore[assignment]

    def uninstall(self) -> None:
        if self._saved is not None:
            sys.excepthook, sys.exit = self._saved
            self._saved = None

    def error(self) -> Optional[BaseException]:
        if self.exception is not None:
            return self.exception
        if self.exit_code not in (None, 0):
            return RuntimeError(f"exit code {self.exit_code}")
        return None
