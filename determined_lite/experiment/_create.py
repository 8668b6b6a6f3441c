"""Creating, activating and running an experiment: what ``det-lite experiment create`` and
``det-lite experiment activate`` call (re-exported by the package).

Both return the process exit code (design.md: 0 when the experiment COMPLETED, 1 when it failed
or stopped before completing, 2 for bad input). ``activate_experiment`` raises
``NotFoundError`` (store) for an unknown id and ``ActivationRefused`` when the experiment's
state does not allow it. Importing this module imports only the standard library.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, Optional, Sequence, TextIO

from determined_lite._timeouts import seconds_env_problem
from determined_lite.experiment._checks import (
    check_callback_modules,
    check_entrypoint,
    print_determined_notice,
)
from determined_lite.experiment._exit import EXIT_OK, ActivationRefused, bad_input


def _spawn_background(experiment_id: int, lock: Any, test: bool = False, resume: bool = False) -> int:
    """Start the runner in a process of its own and hand it ``lock`` (it holds it from now on)."""
    from determined_lite.experiment._lock import RunnerPhase
    from determined_lite.store._paths import experiment_dir, make_private_dirs, open_private, private_umask

    directory = make_private_dirs(experiment_dir(experiment_id))
    argv = [sys.executable, "-m", "determined_lite.experiment._background", str(experiment_id)]
    argv += ["--lock-fd", str(lock.fileno())]
    argv += ["--test"] if test else []
    argv += ["--resume"] if resume else []
    with os.fdopen(open_private(os.path.join(directory, "runner.log")), "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(lock.fileno(),),
            umask=private_umask(),
        )
    lock.record(proc.pid, RunnerPhase.RUNNING)
    return proc.pid


def _detach(experiment_id: int, lock: Any, test: bool = False, resume: bool = False) -> int:
    from determined_lite.store import Store

    pid = _spawn_background(experiment_id, lock, test=test, resume=resume)
    # ACTIVE and run by `pid` from now on, not when it gets there: a `pause` right after this
    # command returns is a request the runner honours (issue 28.4).
    Store().experiments.set_running(experiment_id, pid)
    return pid


def run_experiment(experiment_id: int, *, test: bool, resume: bool, out: TextIO, lock: Any) -> int:
    """Run the experiment in this process, which holds its runner ``lock``."""
    from determined_lite.experiment._lock import RunnerPhase
    from determined_lite.experiment._runner import ExperimentRunner
    from determined_lite.store import Store

    runner = ExperimentRunner(
        Store(), experiment_id, test_mode=test, out=out, show_progress=out.isatty(), lock=lock
    )
    try:
        code = runner.run(resume=resume)
    finally:
        lock.record(os.getpid(), RunnerPhase.STOPPING)
    from determined_lite._terminal import terminal_width

    # One column short of the edge, as the bars: writing the last column makes some terminals wrap.
    print(runner.endings.summary(width=terminal_width(out) - 1 if out.isatty() else None), file=out)
    if runner.endings.final_line:
        print(runner.endings.final_line, file=out)
    if test and code == EXIT_OK:
        print("Model definition test succeeded", file=out)
    return code


def create_experiment(
    config_path: str,
    context_dir: str,
    overrides: Sequence[str] = (),
    detach: bool = False,
    test: bool = False,
    out: TextIO = sys.stdout,
) -> int:
    """Validate, snapshot the context directory (``_context.py``), record and run an experiment
    (in the foreground unless ``detach``). A config or context det-lite refuses is one line on
    stderr and exit 2, with nothing recorded."""
    from determined_lite.launch._executor import executor_problem

    if not os.path.isdir(context_dir):
        return bad_input(f"context directory {context_dir!r} does not exist")
    context_dir = os.path.abspath(context_dir)
    from determined_lite.config import read_config

    problem = seconds_env_problem(os.environ)  # before the fork server inherits it
    if problem:
        return bad_input(problem)
    written = read_config(config_path, overrides)  # ConfigError → the CLI exits 2
    if not detach:  # this process runs the trials: their fork server warms up meanwhile
        _prestart(copy.deepcopy(written), context_dir)
    raw = _load_config(written, config_path)
    problem = executor_problem(raw)  # too many slots, a missing engine: nothing recorded
    if problem:
        return bad_input(f"{config_path}: {problem}")
    try:
        experiment_id = _record(config_path, context_dir, raw)
    except _Refused as e:
        return bad_input(str(e))
    print(f"Created experiment {experiment_id}", file=out)
    return _start(experiment_id, detach=detach, test=test, out=out)


def _prestart(written: Dict[str, Any], context_dir: str) -> None:
    """Start the trials' fork server from the config as written (read once, before its
    validation: seconds of imports under load): a server whose environment the validated config
    changes is replaced at the first trial's start; a config that fails validation stops it at
    exit."""
    from determined_lite.experiment._trial_launch import prestart

    try:
        variables = written.get("environment", {}).get("environment_variables")
        if isinstance(variables, list):  # the normalised form names the device
            written["environment"]["environment_variables"] = {"cpu": variables}
        prestart(written, context_dir)
    except Exception:  # noqa: BLE001 -- only an optimisation; validation reports what is wrong
        pass


class _Refused(Exception):
    """An experiment det-lite refuses before recording it (its message is the error line)."""


def _load_config(written: Dict[str, Any], config_path: str) -> Dict[str, Any]:
    """The validated config as a dict; fields det-lite does not use get one warning line."""
    from determined_lite.searcher import validate_config

    config = validate_config(written, source=config_path)
    if config.unused_fields:
        from determined_lite._errors import warning_line
        from determined_lite.config import unused_fields_warning

        print(warning_line(unused_fields_warning(config.unused_fields, config_path)), file=sys.stderr)
    return config.to_dict()


def _record(config_path: str, context_dir: str, raw: Dict[str, Any]) -> int:
    """Snapshot ``context_dir``, check the snapshot's code and record the experiment (its id).
    Raises :class:`_Refused`, with nothing recorded, for what det-lite refuses."""
    from determined_lite.experiment._context import install_context, stage_context, staged_snapshot
    from determined_lite.experiment._warm_start import WarmStartError, warm_start_checkpoint
    from determined_lite.storage import ContextError, save_secrets
    from determined_lite.store import Store

    try:
        staging = stage_context(context_dir, raw)
    except ContextError as e:
        raise _Refused(str(e)) from None
    try:
        snapshot = staged_snapshot(staging)
        _check_snapshot(config_path, context_dir, raw, snapshot)
        print_determined_notice(raw, snapshot)
        store = Store()
        try:
            warm_start_checkpoint(raw, store)
        except WarmStartError as e:
            raise _Refused(f"{config_path}: {e}") from None
        stored, secrets = _probe_storage(config_path, raw)
        # Recorded as run by this process from the start: `activate` never starts a second runner.
        name = raw.get("name") or "experiment"
        experiment_id = store.experiments.create(
            stored, context_dir, os.path.abspath(config_path), name, pid=os.getpid()
        )
        try:
            save_secrets(experiment_id, secrets)
            install_context(staging, experiment_id)
        except BaseException:
            store.experiments.delete(experiment_id)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return experiment_id


def _probe_storage(config_path: str, raw: Dict[str, Any]) -> Any:
    """Write and delete a test object in the checkpoint storage, a local one too
    (:class:`_Refused` when that fails); the config to record (secrets redacted) and its secrets."""
    from determined_lite.storage import StorageError, checkpoint_storage, redact

    try:
        checkpoint_storage(raw).probe()
    except StorageError as e:
        raise _Refused(f"{config_path}: {e}") from None
    return redact(raw)


def _check_snapshot(config_path: str, context_dir: str, raw: Dict[str, Any], snapshot: str) -> None:
    """Raise :class:`_Refused` when the snapshot lacks the entrypoint or a callback module
    (messages name ``context_dir``, and what ``.detignore`` left out)."""
    from determined_lite.storage import DETIGNORE

    problem = check_entrypoint(raw["entrypoint"], snapshot)
    if problem:
        problem = problem.replace(snapshot, context_dir)
        if check_entrypoint(raw["entrypoint"], context_dir) is None:
            problem += f" (excluded by {DETIGNORE} or det-lite's default patterns)"
        raise _Refused(f"{config_path}: {problem}")
    problem = check_callback_modules(raw["det_lite"]["callback_modules"], snapshot)
    if problem:
        raise _Refused(f"{config_path}: {problem.replace(snapshot, context_dir)}")


def _start(experiment_id: int, *, detach: bool, test: bool, out: TextIO) -> int:
    """Run the experiment just recorded, here or (``detach``) in a process of its own."""
    from determined_lite.experiment._lock import take_runner_lock

    lock = take_runner_lock(experiment_id, wait_s=0)
    try:
        if detach:
            pid = _detach(experiment_id, lock, test=test)
            print(
                f"Running in the background (process {pid}); "
                f"follow with: det-lite experiment logs -f {experiment_id}",
                file=out,
            )
            return EXIT_OK
        return run_experiment(experiment_id, test=test, resume=False, out=out, lock=lock)
    finally:
        lock.release()


def activate_experiment(experiment_id: int, detach: bool = False, out: Optional[TextIO] = None) -> int:
    """Resume a PAUSED experiment, or one whose process died, from its trials' latest checkpoints.

    One runner per experiment (``_lock.py``): on a running experiment, withdraw its pending
    pause request, else refuse (``ExperimentLocked``, naming the process that runs it); when the
    previous run is still exiting, wait for it (bounded). Messages go to ``out`` (default: the
    current ``sys.stdout``).
    """
    from determined_lite.experiment._lock import ExperimentLocked, take_runner_lock
    from determined_lite.store import Action, ExperimentState, Store

    out = out or sys.stdout
    problem = seconds_env_problem(os.environ)
    if problem:
        raise ActivationRefused(problem)  # exit 2, nothing changed
    store = Store()
    experiment = _activatable(store, experiment_id)
    if experiment["running"] and experiment["state"] == ExperimentState.ACTIVE:
        if experiment["requested_action"] == Action.PAUSE:
            store.requests.clear(experiment_id, Action.PAUSE)
            print(f"Experiment {experiment_id} is running; its pause request is withdrawn.", file=out)
            return EXIT_OK
        raise ExperimentLocked(
            f"experiment {experiment_id} is already running in process {experiment['pid']}; "
            f"pause or kill it first (det-lite experiment pause {experiment_id})"
        )
    lock = take_runner_lock(experiment_id, out=out)
    try:
        _activatable(store, experiment_id)  # again, under the lock: the previous run may have ended it
        store.requests.clear(experiment_id)
        if detach:
            pid = _detach(experiment_id, lock, resume=True)
            print(f"Activating experiment {experiment_id}", file=out)
            print(f"Running in the background (process {pid})", file=out)
            return EXIT_OK
        store.experiments.set_running(experiment_id, os.getpid())  # before a `pause` can see it PAUSED
        print(f"Activating experiment {experiment_id}", file=out)
        return run_experiment(experiment_id, test=False, resume=True, out=out, lock=lock)
    finally:
        lock.release()


def _activatable(store: Any, experiment_id: int) -> Dict[str, Any]:
    """The experiment, unless it is unknown (``NotFoundError``) or ended (``ActivationRefused``)."""
    from determined_lite.store import TERMINAL_STATES, ExperimentKind, NotFoundError

    experiment = store.experiments.get(experiment_id)
    if experiment is None:
        raise NotFoundError(f"experiment {experiment_id} not found")
    if experiment.get("kind") == ExperimentKind.LOCAL:
        raise ActivationRefused(
            f"experiment {experiment_id} is a local run of Trainer.fit from Python; resume it there "
            f"with Trainer.fit(latest_checkpoint=...) (its checkpoints: det-lite checkpoint list "
            f"--experiment {experiment_id})"
        )
    if experiment.get("kind") == ExperimentKind.UNMANAGED:
        raise ActivationRefused(
            f"experiment {experiment_id} is an unmanaged run of a Core API script (core_v2.init()); "
            "run the script again, with core_v2.Config(external_experiment_id=..., "
            "external_trial_id=...) to resume its trial"
        )
    if experiment["state"] in TERMINAL_STATES:
        raise ActivationRefused(
            f"experiment {experiment_id} is {experiment['state']}; only a PAUSED experiment, or an "
            "ACTIVE one whose process died, can be activated"
        )
    return experiment
