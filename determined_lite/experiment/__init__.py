"""Experiments: run a validated config's trials through the searcher, the launcher and the store.

``create_experiment`` and ``activate_experiment`` are what ``det-lite experiment create`` and
``det-lite experiment activate`` call; both return the process exit code (design.md: 0 when the
experiment COMPLETED, 1 when it failed or stopped before completing, 2 for bad input).
``activate_experiment`` raises ``NotFoundError`` (store) for an unknown id and
``ActivationRefused`` when the experiment's state does not allow it; the CLI prints both as
``det-lite: error: ...`` and exits 2. Importing this package imports only the standard library.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, TextIO

from determined_lite._errors import did_you_mean

# Process exit codes (the CLI's too): success, the experiment or a trial failed, bad input.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ActivationRefused(ValueError):
    """``activate_experiment`` on an experiment that has ended or that another process runs."""


def _error(message: str) -> int:
    from determined_lite._errors import error_line

    print(error_line(message), file=sys.stderr)
    return EXIT_BAD_INPUT


def check_entrypoint(entrypoint: str, context_dir: str) -> Optional[str]:
    """Why ``module:Class`` or a script cannot be found in ``context_dir`` (None when it can),
    without running it."""
    from determined_lite.config._launcher import script_command

    script = script_command(entrypoint)
    if script is not None:
        return _check_script(script, entrypoint, context_dir)
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        return f"entrypoint: expected 'module:Class', got {entrypoint!r}"
    spec = _find_module(module_name, [context_dir] + sys.path)
    if spec is None:
        hint = did_you_mean(module_name, _module_names(context_dir))
        where = f"in context directory {context_dir}{hint}"
        return f"entrypoint {entrypoint!r}: no module {module_name!r} {where}"
    origin = spec.origin
    if origin and origin.endswith(".py") and "." not in attr:
        try:
            with open(origin) as f:
                tree = ast.parse(f.read(), filename=origin)
        except (OSError, SyntaxError) as e:
            return f"entrypoint {entrypoint!r}: cannot read module {module_name!r} ({origin}): {e}"
        if attr not in _top_level_names(tree):
            trials = _trial_classes(tree)
            hint = did_you_mean(attr, trials or [n.name for n in tree.body if isinstance(n, ast.ClassDef)])
            if not hint and trials:
                hint = f" (its trial classes: {', '.join(trials)})"
            return f"entrypoint {entrypoint!r}: module {module_name!r} ({origin}) defines no {attr!r}{hint}"
    return None



def _check_script(script: Any, entrypoint: str, context_dir: str) -> Optional[str]:
    """Why the script of ``entrypoint`` is missing (None when it is there)."""
    if script.module is not None:
        if _find_module(script.module, [context_dir] + sys.path) is None:
            hint = did_you_mean(script.module, _module_names(context_dir))
            where = f"in context directory {context_dir}{hint}"
            return f"entrypoint {entrypoint!r}: no module {script.module!r} {where}"
        return None
    path = str(script.path)
    if os.path.isabs(path) or not os.path.isfile(os.path.join(context_dir, path)):
        scripts = [n for n in _files(context_dir) if n.endswith(".py")]
        hint = did_you_mean(path, scripts)
        return f"entrypoint {entrypoint!r}: no script {path!r} in context directory {context_dir}{hint}"
    return None


def _files(context_dir: str) -> List[str]:
    try:
        return sorted(os.listdir(context_dir))
    except OSError:
        return []


def _module_names(context_dir: str) -> List[str]:
    """Top-level modules and packages of a context directory (for did-you-mean)."""
    try:
        entries = os.listdir(context_dir)
    except OSError:
        return []
    names = [e[:-3] for e in entries if e.endswith(".py")]
    names += [e for e in entries if os.path.isfile(os.path.join(context_dir, e, "__init__.py"))]
    return sorted(names)


def _trial_classes(tree: ast.Module) -> List[str]:
    """Top-level classes of a module deriving from ``PyTorchTrial`` (by base name, also through
    classes of the same module), in definition order."""
    trials: List[str] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if base_name == "PyTorchTrial" or base_name in trials:
                trials.append(node.name)
                break
    return trials


def check_callback_modules(modules: Sequence[str], context_dir: str) -> Optional[str]:
    """Why a module of ``det_lite.callback_modules`` cannot be found (None when all can), without
    importing it: workers import them from the context directory, then the environment."""
    for i, name in enumerate(modules):
        if _find_module(name, [context_dir] + sys.path) is None:
            hint = f" (a module name, not a file: {name[:-3]!r}?)" if name.endswith(".py") else ""
            return (
                f"det_lite.callback_modules[{i}]: no module {name!r} in context directory {context_dir} "
                f"or the Python environment{hint}"
            )
    return None


def _find_module(name: str, path: List[str]) -> Optional[importlib.machinery.ModuleSpec]:
    """Where ``name`` would be imported from with ``path`` as sys.path, ignoring modules already
    imported in this process (``importlib.util.find_spec`` would return those)."""
    spec: Optional[importlib.machinery.ModuleSpec] = None
    search: Optional[List[str]] = path
    prefix = ""
    for part in name.split("."):
        if search is None:
            return None  # a module, not a package: it has no submodules
        try:
            spec = importlib.machinery.PathFinder.find_spec(prefix + part, search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or []) or None
        prefix += part + "."
    return spec


def _print_determined_notice(raw: Dict[str, Any], context_dir: str) -> None:
    """One line on stderr when the trial code imports ``determined``: the alias or a real package."""
    from determined_lite.compat import determined_notice
    from determined_lite.config import environment_variables

    pythonpath = environment_variables(raw).get("PYTHONPATH", "")
    from determined_lite.config._launcher import script_command

    entrypoint = raw["entrypoint"]
    module = None if script_command(entrypoint) is not None else entrypoint.partition(":")[0]
    notice = determined_notice(context_dir, [p for p in pythonpath.split(os.pathsep) if p], module)
    if notice:
        print(f"det-lite: {notice}", file=sys.stderr)


def _top_level_names(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions: accept anything
            names |= _any_names(node)
    return names


def _any_names(node: ast.AST) -> set:
    return {n.name for n in ast.walk(node) if isinstance(n, ast.ClassDef)} | {
        a.asname or a.name
        for n in ast.walk(node)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }


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
    Store().set_experiment_pid(experiment_id, pid)  # running from now on, not when it gets there
    return pid


def _run(experiment_id: int, *, test: bool, resume: bool, out: TextIO, lock: Any) -> int:
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
    print(runner.summary(), file=out)
    if runner.final_line:
        print(runner.final_line, file=out)
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
    from determined_lite.experiment._context import install_context, stage_context, staged_snapshot
    from determined_lite.experiment._lock import take_runner_lock
    from determined_lite.experiment._warm_start import WarmStartError, warm_start_checkpoint
    from determined_lite.launch._engines import engine_problem
    from determined_lite.searcher import load_config
    from determined_lite.storage import DETIGNORE, ContextError
    from determined_lite.store import Store

    if not os.path.isdir(context_dir):
        return _error(f"context directory {context_dir!r} does not exist")
    context_dir = os.path.abspath(context_dir)
    config = load_config(config_path, overrides)  # ConfigError → the CLI exits 2
    if config.unused_fields:
        from determined_lite._errors import warning_line
        from determined_lite.config import unused_fields_warning

        print(warning_line(unused_fields_warning(config.unused_fields, config_path)), file=sys.stderr)
    raw: Dict[str, Any] = config.to_dict()
    resources = raw["resources"]
    problem = engine_problem(resources["distributed_backend"], resources["slots_per_trial"])
    if problem:
        return _error(f"{config_path}: {problem}")
    try:
        staging = stage_context(context_dir, raw)
    except ContextError as e:
        return _error(str(e))
    try:
        snapshot = staged_snapshot(staging)
        problem = check_entrypoint(raw["entrypoint"], snapshot)
        if problem:
            problem = problem.replace(snapshot, context_dir)
            if check_entrypoint(raw["entrypoint"], context_dir) is None:
                problem += f" (excluded by {DETIGNORE} or det-lite's default patterns)"
            return _error(f"{config_path}: {problem}")
        problem = check_callback_modules(raw["det_lite"]["callback_modules"], snapshot)
        if problem:
            return _error(f"{config_path}: {problem.replace(snapshot, context_dir)}")
        _print_determined_notice(raw, snapshot)
        store = Store()
        try:
            warm_start_checkpoint(raw, store)
        except WarmStartError as e:
            return _error(f"{config_path}: {e}")
        # Recorded as run by this process from the start: `activate` never starts a second runner.
        experiment_id = store.create_experiment(
            raw, context_dir, os.path.abspath(config_path), raw.get("name") or "experiment", pid=os.getpid()
        )
        try:
            install_context(staging, experiment_id)
        except BaseException:
            store.delete_experiment(experiment_id)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"Created experiment {experiment_id}", file=out)
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
        return _run(experiment_id, test=test, resume=False, out=out, lock=lock)
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
    store = Store()
    experiment = _activatable(store, experiment_id)
    if experiment["running"] and experiment["state"] == ExperimentState.ACTIVE:
        if experiment["requested_action"] == Action.PAUSE:
            store.clear_action(experiment_id, Action.PAUSE)
            print(f"Experiment {experiment_id} is running; its pause request is withdrawn.", file=out)
            return EXIT_OK
        raise ExperimentLocked(
            f"experiment {experiment_id} is already running in process {experiment['pid']}; "
            f"pause or kill it first (det-lite experiment pause {experiment_id})"
        )
    lock = take_runner_lock(experiment_id, out=out)
    try:
        _activatable(store, experiment_id)  # again, under the lock: the previous run may have ended it
        store.clear_action(experiment_id)
        print(f"Activating experiment {experiment_id}", file=out)
        if detach:
            pid = _detach(experiment_id, lock, resume=True)
            print(f"Running in the background (process {pid})", file=out)
            return EXIT_OK
        return _run(experiment_id, test=False, resume=True, out=out, lock=lock)
    finally:
        lock.release()


def _activatable(store: Any, experiment_id: int) -> Dict[str, Any]:
    """The experiment, unless it is unknown (``NotFoundError``) or ended (``ActivationRefused``)."""
    from determined_lite.store import TERMINAL_STATES, ExperimentKind, NotFoundError

    experiment = store.get_experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"experiment {experiment_id} not found")
    if experiment.get("kind") == ExperimentKind.LOCAL:
        raise ActivationRefused(
            f"experiment {experiment_id} is a local run of Trainer.fit from Python; resume it there "
            f"with Trainer.fit(latest_checkpoint=...) (its checkpoints: det-lite checkpoint list "
            f"--experiment {experiment_id})"
        )
    if experiment["state"] in TERMINAL_STATES:
        raise ActivationRefused(
            f"experiment {experiment_id} is {experiment['state']}; only a PAUSED experiment can be activated"
        )
    return experiment


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "ActivationRefused",
    "activate_experiment",
    "check_entrypoint",
    "create_experiment",
]
