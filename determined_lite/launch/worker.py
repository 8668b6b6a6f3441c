"""Entry point of one worker process: ``python -m determined_lite.launch.worker SPEC.json``.

Every launcher (in-process, ``horovodrun``, ``torch.distributed.run``) starts this module; it
joins the engine named by the spec, runs the trial through the one training loop, and the chief
writes a :class:`WorkerResult`. Exit status: 0 when the trial finished, stopped on request or
raised ``InvalidHP`` (the result file says which), 1 on an error.
"""

from __future__ import annotations

import importlib
import logging
import os
import runpy
import socket
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

from determined_lite._errors import (
    DiskFullError,
    InvalidHP,
    did_you_mean,
    find_action_required,
    find_trial_check,
    is_disk_full,
)
from determined_lite.launch._exit import exit_now
from determined_lite.launch._fit import fit_plan, result_of, trial_info
from determined_lite.launch._logs import install_rank_prefix
from determined_lite.launch._watchdog import (
    Heartbeat,
    StallWatchdog,
    main_thread_stack,
    setup_timeout,
    stall_timeout,
)
from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.runtime._failures import (
    FailureKind,
    FailurePoint,
    NoRestart,
    own_code_error,
    record_failure_point,
    record_no_restart,
)
from determined_lite.runtime._spec import WorkerResult, WorkerSpec, WorkerStatus
from determined_lite.store._paths import restrict_umask

logger = logging.getLogger("determined_lite")


def import_entrypoint(entrypoint: str, context_dir: str) -> Any:
    """Import ``module:Class`` with ``context_dir`` first on ``sys.path``; errors name the module."""
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entrypoint must look like 'module:Class', got {entrypoint!r}")
    context_dir = os.path.abspath(context_dir)
    if context_dir not in sys.path:
        sys.path.insert(0, context_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ImportError(
                f"entrypoint {entrypoint!r}: no module {module_name!r} in context directory {context_dir}"
            ) from e
        raise
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            hint = did_you_mean(part, _trial_class_names(obj))
            raise ImportError(
                f"entrypoint {entrypoint!r}: module {module_name!r} has no attribute {attr!r}{hint}"
            )
        obj = getattr(obj, part)
    return obj


def _trial_class_names(namespace: Any) -> List[str]:
    """Names of the ``PyTorchTrial`` subclasses in ``namespace`` (a module or class); all its
    classes when it has none."""
    from determined_lite.pytorch import PyTorchTrial

    classes = {n: v for n, v in vars(namespace).items() if isinstance(v, type) and not n.startswith("_")}
    trials = [n for n, v in classes.items() if issubclass(v, PyTorchTrial) and v is not PyTorchTrial]
    return trials or list(classes)


class ProgressWatch(PyTorchCallback):
    """A core callback that knows whether this run completed a batch (a failure before that is
    not restarted: it would recur). Costs nothing per batch: it reads the loop's state when asked."""

    def __init__(self) -> None:
        self._context: Any = None
        self._first_batch: Optional[int] = None

    def bind(self, context: Any) -> None:
        self._context = context

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self._first_batch = first_batch_idx

    @property
    def progressed(self) -> bool:
        if self._context is None or self._first_batch is None:
            return False
        return bool(self._context.harness.state.batches_done > self._first_batch)

    @property
    def batches_done(self) -> Optional[int]:
        """The batches the trial had completed (None before the loop started)."""
        if self._context is None or self._first_batch is None:
            return None
        return int(self._context.harness.state.batches_done)


class StallWatch(PyTorchCallback):
    """A core callback keeping this worker's :class:`Heartbeat` at the hook it entered last
    (attribute writes only; the watchdog thread reads them)."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        self.beat = heartbeat

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self.beat.enter("on_trial_startup", first_batch_idx)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.beat.enter("train_batch", batch_idx)

    def on_before_backward(self, loss: Any) -> None:
        self.beat.enter("backward")

    def on_after_backward(self, loss: Any) -> None:
        self.beat.enter("train_batch after backward")

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.beat.enter("the loop after train_batch (report, validation, checkpoint)", batch_idx)

    def on_training_workload_end(self, avg_metrics: Dict[str, Any], batch_metrics: Any) -> None:
        self.beat.enter("the loop after a report")

    def on_validation_start(self) -> None:
        self.beat.enter("validation")

    def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.beat.enter(f"evaluate_batch {batch_idx}")

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.beat.enter("the loop after validation")

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:  # the chief only
        self.beat.enter("checkpoint save", every_rank=False)

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:  # the chief only
        self.beat.enter("the loop after a checkpoint", every_rank=False)


def _start_watchdog(spec: WorkerSpec, dist: Any) -> Tuple[Optional[StallWatchdog], List[Tuple[str, Any]]]:
    """The stall watchdog of this worker and its core callback (none when switched off)."""
    timeout = stall_timeout()
    if timeout is None:
        return None, []
    beat = Heartbeat(rank=dist.rank)

    def on_stall(message: str) -> None:
        error = StallError(message)
        stuck = watchdog.stuck or beat
        stack = main_thread_stack() if stuck.rank == dist.rank else []
        shown = [f for f in stack if _is_user_frame(f.filename)] or stack  # a hang in det-lite: all
        where = "".join(traceback.format_list(shown))
        where = f"rank {dist.rank} is stuck here (most recent call last):\n{where}" if shown else ""
        sys.stderr.write(f"det-lite: {message}\n{where}")
        sys.stderr.flush()
        dist.record_failure(error)  # the launcher names this error for the trial
        place = _frame_place(stack[-1]) if stack else None
        point = FailurePoint(stuck.rank, f"StallError: stalled in {stuck.hook}", stuck.batch, place)
        record_failure_point(spec.result_path, dist.rank, point)
        if dist.is_chief:
            result = WorkerResult(WorkerStatus.ERROR, error=f"rank {dist.rank}: StallError: {message}")
            try:
                _save_result(result, spec)
            except OSError:
                pass
        os._exit(1)  # the main thread is stuck: no teardown; the launcher stops the others

    watchdog = StallWatchdog(beat, spec.result_path, timeout, on_stall, setup_timeout(timeout)).start()
    return watchdog, [("_stall_watch", StallWatch(beat))]


class StallError(RuntimeError):
    """A worker made no progress for ``$DET_LITE_STALL_TIMEOUT`` seconds."""


def failure_kind(error: BaseException, progressed: bool, script: bool = False) -> Optional[FailureKind]:
    """Why a trial that failed with ``error`` should not be restarted; None: restart it
    (``script``: a script trial, whose progress is what it reported)."""
    check = find_trial_check(error)
    if check is not None:
        return FailureKind.TRIAL_CHECK if check.every_trial else FailureKind.TRIAL_CHECK_ONE
    if not progressed:
        return FailureKind.BEFORE_REPORT if script else FailureKind.BEFORE_PROGRESS
    return None


def run(
    spec: WorkerSpec,
    dist: Any,
    extra_callbacks: Sequence[Tuple[str, Any]] = (),
    heartbeat: Optional[Heartbeat] = None,
) -> WorkerResult:
    """Run the trial of ``spec`` on this worker and return what it did (``heartbeat``: the stall
    watchdog's, kept current by a script's Core API calls)."""
    from determined_lite.compat import install_alias
    from determined_lite.config._launcher import script_command
    from determined_lite.pytorch import Trainer, init

    install_alias()  # trial code's `import determined` gets det-lite's alias, unless one is installed
    script = script_command(spec.entrypoint)
    if script is not None:
        from determined_lite.launch._script import run_script

        return run_script(spec, script, dist, extra_callbacks, heartbeat)
    trial_cls = import_entrypoint(spec.entrypoint, spec.context_dir)
    info = trial_info(spec)
    with init(hparams=spec.hparams, exp_conf=spec.exp_conf, distributed=dist, trial_info=info) as ctx:
        plan = fit_plan(spec, dist, ctx, extra_callbacks)
        result = Trainer(trial_cls(ctx), ctx).run(plan)
    return result_of(result)


def _watch_supervisor() -> None:
    """Exit when the process that launched this trial dies (SIGKILL leaves no chance to clean up).

    ``DET_LITE_SUPERVISOR_PID`` is set by the launcher on this host; without this watch a
    killed ``det-lite`` would leave workers training (and writing) on their own.
    """
    pid = os.environ.get("DET_LITE_SUPERVISOR_PID")
    if not pid or os.environ.get("DET_LITE_SUPERVISOR_HOST") not in (None, "", socket.gethostname()):
        return

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                try:  # the output pipe usually died with the supervisor
                    sys.stderr.write(f"det-lite: supervisor process {pid} is gone; stopping this worker\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="det-lite-supervisor-watch", daemon=True).start()


def log_info() -> None:
    """Log INFO and above to stderr with times. The root's level is set only when it differs (a
    fork server's worker inherits INFO): setting it clears the level cache of every logger
    (torch's hundreds, ~1 ms)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    if root.level != logging.INFO:
        root.setLevel(logging.INFO)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m determined_lite.launch.worker SPEC.json", file=sys.stderr)
        return 2
    restrict_umask()  # its files (checkpoints, TensorBoard, results) are private
    spec = WorkerSpec.load(argv[0])
    _watch_supervisor()
    from determined_lite import distributed

    dist = distributed.initialize(spec.backend)
    install_rank_prefix(dist.rank, dist.size)
    log_info()
    os.chdir(spec.context_dir)  # as in Determined: the trial runs inside its context directory
    watch = ProgressWatch()
    watchdog, stall_callbacks = _start_watchdog(spec, dist)
    try:
        try:
            heartbeat = watchdog.heartbeat if watchdog is not None else None
            result = run(spec, dist, [("_progress_watch", watch)] + stall_callbacks, heartbeat)
        finally:
            if watchdog is not None:
                watchdog.stop()
    except InvalidHP as e:
        logger.warning("trial raised InvalidHP: %s", e)
        result = WorkerResult(status=WorkerStatus.INVALID_HP, error=str(e) or type(e).__name__)
    except BaseException as e:  # noqa: B036 -- report everything, then fail the worker
        needed = find_action_required(e)
        if needed is not None:
            # A full disk, an untrusted checkpoint: a restart would fail alike. One line, no
            # traceback; every worker that meets it reports it (the chief may be stopped first).
            sys.stderr.write(f"det-lite: {needed}\n")
            sys.stderr.flush()
            error = f"rank {dist.rank}: {type(needed).__name__}: {needed}"
            result = WorkerResult(WorkerStatus.ERROR, error=error, action_required=str(needed))
            _save_result(result, spec, say_full=False)  # the line above says enough
            dist.abort()
            return 1
        _report_error(e, spec, dist, watch)
        if dist.is_chief:
            error = f"rank {dist.rank}: {type(e).__name__}: {e}"
            _save_result(WorkerResult(status=WorkerStatus.ERROR, error=error), spec)
        dist.abort()
        return 1
    if dist.is_chief:
        _save_result(result, spec)
    dist.close()
    return 0


def _report_error(error: BaseException, spec: WorkerSpec, dist: Any, watch: ProgressWatch) -> None:
    """Print the error this worker failed with (once: a peer's failure only says so) and record
    whether a restart could help (:func:`failure_kind`) and where it failed (a repeat of that
    is not retried)."""
    if dist.size > 1 and dist.is_peer_failure(error):
        # Another worker failed first; its error is the one to report, once.
        sys.stderr.write(f"det-lite: stopping: another worker failed ({type(error).__name__})\n")
        sys.stderr.flush()
        return
    check = find_trial_check(error)
    sys.stderr.write(traceback.format_exc() if check is None else check_error_text(check))
    sys.stderr.flush()
    script, batch = _script_trial(), watch.batches_done
    if script is None or batch is not None:  # a class, or a script's Trainer.fit: the loop's batches
        kind = failure_kind(error, watch.progressed or bool(script and script.progressed))
    else:  # a script's own loop: what it reported through the Core API is its progress
        kind = failure_kind(error, bool(script.progressed), script=True)
        if kind is None and own_code_error(error, spec.context_dir):
            kind = FailureKind.SCRIPT_RAISED
        batch = int(script.steps_completed)
    if kind is not None:
        record_no_restart(spec.result_path, NoRestart(dist.rank, kind, _first_line(error)))
    point = FailurePoint(dist.rank, _first_line(error), batch, innermost_frame(error))
    record_failure_point(spec.result_path, dist.rank, point)


def _script_trial() -> Any:
    """The script trial this worker runs (``launch/_script.ScriptTrial``), None for a class."""
    from determined_lite.runtime._cluster import active_trial

    return active_trial()


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_RUNPY = os.path.abspath(runpy.__file__)


def _is_user_frame(filename: str) -> bool:
    """A frame of the user's code: not det-lite's (its ``determined`` alias included), not runpy's."""
    path = os.path.abspath(filename)
    return not (path.startswith(_PACKAGE_DIR) or path == _RUNPY or filename.startswith("<frozen runpy"))


def check_error_text(error: BaseException) -> str:
    """How a :class:`TrialCheckError` is printed: the user's frames that led to it (a typo's line
    in ``__init__``), never det-lite's own; one line when none is the user's."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_user_frame(f.filename)]
    line = f"{type(error).__name__}: {error}\n"
    if not frames:
        return f"det-lite: {line}"
    return "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + line


def innermost_frame(error: BaseException) -> Optional[str]:
    """``file:line in function`` of the frame that raised ``error`` (None without a traceback)."""
    frames = traceback.extract_tb(error.__traceback__)
    return _frame_place(frames[-1]) if frames else None


def _frame_place(frame: traceback.FrameSummary) -> str:
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"


def _first_line(error: BaseException) -> str:
    message = str(error).strip()
    return f"{type(error).__name__}: {message.splitlines()[0]}" if message else type(error).__name__


def _save_result(result: WorkerResult, spec: WorkerSpec, say_full: bool = True) -> None:
    """Write ``result.json``; a full disk there gets one line unless ``say_full`` is False (the
    runner then sees no result)."""
    try:
        result.save(spec.result_path)
    except OSError as e:
        if not is_disk_full(e):
            raise
        if not say_full:
            return
        full = DiskFullError(os.path.dirname(spec.result_path), "cannot write the trial's result.json")
        sys.stderr.write(f"det-lite: {full}\n")


if __name__ == "__main__":
    exit_now(main())  # skips the slow teardown of torch and Gloo (see _exit.py)
