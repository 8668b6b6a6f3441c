"""Starting one run of a trial: its WorkerSpec from the experiment's settings, then the
experiment's executor (``resources.executor``) places and starts it.

Everything here is read once from the stored (validated) config by the runner and shared by
every run of the experiment's trials; a run adds its trial, hyperparameters, seed, the length to
train to and the checkpoint it resumes from.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from determined_lite.config import (
    OWN_LENGTH,
    TEST_MODE_STEPS,
    TEST_MODE_VALIDATION_BATCHES,
    ExperimentSettings,
    SearcherSettings,
    TrainingSettings,
    environment_variables,
)
from determined_lite.config._plugins import SINGLE_ENGINE
from determined_lite.experiment._warm_start import warm_start_checkpoint
from determined_lite.launch import WorkerSpec
from determined_lite.launch._executor import Executor, TrialRun, make_executor
from determined_lite.launch._local import cpu_slots
from determined_lite.launch._watchdog import remove_heartbeats
from determined_lite.runtime._failures import remove_failure_points, remove_no_restart
from determined_lite.runtime._next_op import enabled as next_op_enabled
from determined_lite.runtime._next_op import remove_next_op_files
from determined_lite.runtime._spec import progress_path
from determined_lite.store._paths import (
    checkpoint_root,
    context_snapshot_dir,
    experiment_dir,
    make_private_dirs,
)
from determined_lite.tensorboard import trial_tensorboard_path


@dataclasses.dataclass(frozen=True)
class TrialLauncher:
    """The experiment's side of every trial run (its config, settings, store, runner lock)."""

    experiment_id: int
    config: Dict[str, Any]
    context_dir: str
    run_dir: str
    store_path: str
    settings: ExperimentSettings
    searcher: SearcherSettings
    training: TrainingSettings
    warm_start: Optional[str]
    test_mode: bool
    pass_fds: Tuple[int, ...]  # the runner lock's, held by every trial process (_lock.py)
    executor: Executor  # where the trial runs go (resources.executor)

    @classmethod
    def of(
        cls,
        store: Any,
        experiment: Mapping[str, Any],
        settings: ExperimentSettings,
        searcher: SearcherSettings,
        test_mode: bool,
        pass_fds: Tuple[int, ...],
    ) -> "TrialLauncher":
        """The launcher of a stored experiment (``store.experiments.get``) with the settings the
        runner read from its config."""
        experiment_id, config = experiment["id"], experiment["config"]
        snapshot = context_snapshot_dir(experiment_id)
        return cls(
            experiment_id=experiment_id,
            config=config,
            # Trials run from the snapshot `experiment create` made (older experiments: the original).
            context_dir=snapshot if os.path.isdir(snapshot) else experiment["context_dir"],
            run_dir=experiment_dir(experiment_id),
            store_path=store.path,
            settings=settings,
            searcher=searcher,
            training=TrainingSettings.from_config(config),  # carried by every WorkerSpec
            warm_start=warm_start_checkpoint(config, store),  # checked by experiment create
            test_mode=test_mode,
            pass_fds=pass_fds,
            executor=make_executor(config),
        )

    def start(
        self,
        trial_id: int,
        hparams: Dict[str, Any],
        seed: int,
        length: int,
        latest: Optional[str],
        on_output: Callable[[str], None],
        on_end: Optional[Callable[[], None]] = None,
    ) -> TrialRun:
        """Start a run of ``trial_id`` to ``length`` searcher units, from checkpoint ``latest``
        (``on_end``: the executor's, called once the run's processes ended)."""
        trial_dir = os.path.join(self.run_dir, f"trial_{trial_id}")
        make_private_dirs(trial_dir)
        spec = WorkerSpec(
            entrypoint=self.config["entrypoint"],
            context_dir=self.context_dir,
            exp_conf=self.config,
            hparams=hparams,
            result_path=os.path.join(trial_dir, "result.json"),
            max_length={self.searcher.unit: length},
            trial_seed=seed,
            trial_id=trial_id,
            experiment_id=self.experiment_id,
            latest_checkpoint=latest,
            warm_start=None if latest else self.warm_start,
            test_mode=self.test_mode,
            store_path=self.store_path,
            checkpoint_root=checkpoint_root(self.config),
            tensorboard_path=trial_tensorboard_path(self.experiment_id, trial_id),
            backend=self.backend(),
            slots=self.settings.slots_per_trial,
            settings=self.training.to_json(),
            ask_next_op=self.asks_next_op(length),
            wake_path=self.wake_path,
        )
        for stale in (spec.result_path, progress_path(spec.result_path)):
            if os.path.exists(stale):
                os.unlink(stale)
        remove_no_restart(spec.result_path)
        remove_failure_points(spec.result_path)
        remove_heartbeats(spec.result_path)
        remove_next_op_files(spec.result_path)
        return self.executor.start(
            spec,
            os.path.join(trial_dir, "spec.json"),
            on_output=on_output,
            env=self.worker_env(),
            pass_fds=self.pass_fds,
            on_end=on_end,
        )

    def asks_next_op(self, length: int) -> bool:
        """Whether a run to ``length`` asks the runner for its next operation at its end (the
        searcher may want more of it: an ASHA rung below the top; runtime/_next_op.py)."""
        own = length == OWN_LENGTH or self.test_mode
        return not own and length < self.searcher.max_length and next_op_enabled(self.worker_env())

    @property
    def wake_path(self) -> Optional[str]:
        """The runner's FIFO its runs' chiefs write to (``_wakeup.py``), when they run on this
        machine; None: the runner polls for their questions."""
        return os.path.join(self.run_dir, "wake.fifo") if self.executor.chief_is_local() else None

    def prestart(self) -> None:
        """Start what the first trials would wait for (the fork server's imports) now."""
        self.executor.prestart(self.context_dir, self.worker_env())

    def backend(self) -> str:
        """The launcher's engine: one process for one slot without hosts, or for a script that
        names no Determined launcher (it sees all the trial's slots); else the config's."""
        if (self.settings.slots_per_trial == 1 and not self.settings.hosts) or self.settings.script_once:
            return SINGLE_ENGINE
        return self.settings.distributed_backend

    def worker_env(self) -> Dict[str, str]:
        return worker_env(self.config)

    def goal(self, length: int) -> str:
        """What a run to ``length`` is asked to do, in words (the runner logs it)."""
        if self.test_mode:
            k = self.training.aggregation_frequency
            return (
                f"test of {TEST_MODE_STEPS} optimizer steps ({TEST_MODE_STEPS * k} batches), "
                f"{TEST_MODE_VALIDATION_BATCHES} validation batches and a checkpoint"
            )
        if length == OWN_LENGTH:
            return "train to the length the script sets"
        return f"train to {length} {self.searcher.time_metric or self.searcher.unit}"


def worker_env(config: Mapping[str, Any]) -> Dict[str, str]:
    """``environment.environment_variables``, plus one intra-op thread per slot by default.

    On CPU a slot is a core: workers that each spun up threads for every core would fight
    over them when trials run side by side. ``OMP_NUM_THREADS`` set by the user wins.
    """
    env = environment_variables(config)
    if "OMP_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cpu_slots()))
    return env


def prestart(config: Mapping[str, Any], context_dir: str) -> None:
    """Start in this process what the first runs of ``config``'s trials would wait for (the
    fork server's imports), as early as the config is known; the runner reuses it."""
    make_executor(config).prestart(context_dir, worker_env(config))
