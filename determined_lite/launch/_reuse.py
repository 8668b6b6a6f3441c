"""Whether a forked 1-slot worker may run its experiment's next trial, and what it resets first.

A worker forked by the fork server (``_forkserver_serve.py``) runs one trial. When the trial
ended with exit status 0 and left nothing behind that the next trial could see, the worker
*parks*, and the runner may hand it the next trial of the same experiment
(``_forkserver.ForkServer.spawn``, as Ray Tune reuses its actors): the fork, the copy-on-write
faults of every page a trial touches and the process's teardown are then paid once per worker
instead of once per trial (~40 ms of CPU a trial, ``benchmarks/README.md``, round 11).

What a trial leaves behind is reset or checked. **Reset** before the next trial: the modules it
imported from its context directory (its own module globals) and det-lite's, ``sys.path``, the
warnings filters and their once-registries; the fork server's set-up of a child then gives the
next trial its environment, working directory, umask, output and fresh random states, as for a
fresh fork, and det-lite seeds it. **Checked** (:func:`left_behind`, after a collection, so
that what the trial left unreachable is gone), and the worker exits instead of parking when any
differs from before the trial: Python threads (det-lite's supervisor watch aside), processes in
its process group, open file descriptors, ``atexit`` handlers and live ``weakref.finalize``
objects, signal handlers, the interpreter's streams and hooks, torch's global settings,
``torch.compile``'s counters, the levels and handlers of the loggers that existed, and the
attributes of :data:`WATCHED_MODULES` (set, rebound or, for a registry, resized).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
import types
import warnings
import weakref
from typing import Any, Dict, FrozenSet, Optional, Tuple

SUPERVISOR_WATCH = "det-lite-supervisor-watch"  # launch/worker.py's thread, one per worker
# Modules whose attributes a trial may set or patch, or whose registries it may add to (torch's
# global module and optimizer hooks): a new, rebound or resized attribute keeps the worker from
# being reused. A submodule imported since is no trace.
WATCHED_MODULES = (
    "builtins",
    "random",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.nn.modules.module",
    "torch.optim",
    "torch.optim.optimizer",
    "torch.utils.data",
    "numpy",
    "numpy.random",
    "determined_lite",
    "determined_lite.pytorch",
    "determined_lite.pytorch._callback",  # global callbacks
    "determined_lite.core",
    "determined_lite.tensorboard",
)
_CONTAINERS = (dict, list, set)
_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


@dataclasses.dataclass(frozen=True)
class Before:
    """What a worker was like when its trial started."""

    modules: FrozenSet[str]
    path: Tuple[str, ...]
    warnings: Tuple[Any, ...]
    checked: Dict[str, Any]


def before_trial() -> Before:
    """Take the state :func:`left_behind` compares with and :func:`reset` restores (after a
    collection, as the check is: what was already unreachable is no trace of the trial's)."""
    gc.collect()
    checked = _checked(group=False)
    checked["process group"] = 0  # a trial's worker starts alone in its group (its own session)
    return Before(frozenset(sys.modules), tuple(sys.path), tuple(warnings.filters), checked)


def left_behind(before: Before) -> Optional[str]:
    """What the trial left that a next trial would see (None: nothing; the worker may park).
    Unreachable objects are collected first (a store connection in a reference cycle closes)."""
    gc.collect()
    after = _checked()
    for name, value in before.checked.items():
        now = after[name]
        if isinstance(value, dict):  # by key: a logger or a module created since is no trace
            if any(now.get(k) != v for k, v in value.items()):
                return name
        elif value != now:
            return name
    return None


def reset(before: Before, context_dir: str) -> None:
    """Forget the modules the trial imported from ``context_dir`` and det-lite's own that it
    imported (the fork server's image has the rest), and restore ``sys.path`` and the warnings
    filters (their once-registries are invalidated, so the next trial sees each warning again,
    as a fresh process would)."""
    root = os.path.join(os.path.realpath(context_dir), "")
    for name in set(sys.modules) - before.modules:
        path = getattr(sys.modules.get(name), "__file__", None)
        ours = name.split(".", 1)[0] in ("determined_lite", "determined")
        if ours or (path and os.path.realpath(path).startswith(root)):
            del sys.modules[name]
    sys.path[:] = before.path
    warnings.filters[:] = before.warnings  # type: ignore[index]
    warnings._filters_mutated()  # type: ignore[attr-defined]


def _checked(group: bool = True) -> Dict[str, Any]:
    return {
        "threads": _threads(),
        "process group": _group_members() if group else None,
        "file descriptors": _open_fds(),
        "atexit handlers": atexit._ncallbacks(),
        "weakref.finalize objects": len(getattr(weakref.finalize, "_registry", ())),
        "signal handlers": tuple(signal.getsignal(s) for s in _SIGNALS),
        "sys": _sys_state(),
        "torch settings": _torch_settings(),
        "torch.compile counters": _compile_counters(),
        "loggers": _loggers(),
        "module bindings": _bindings(),
    }


def _open_fds() -> FrozenSet[int]:
    """The open descriptors (the listing's own, closed once listed, is not)."""
    listed = [int(name) for name in os.listdir("/proc/self/fd")]
    open_now = set()
    for fd in listed:
        try:
            os.fstat(fd)
        except OSError:
            continue
        open_now.add(fd)
    return frozenset(open_now)


def _threads() -> Tuple[str, ...]:
    main = threading.main_thread()
    return tuple(
        sorted(t.name for t in threading.enumerate() if t is not main and t.name != SUPERVISOR_WATCH)
    )


def _group_members() -> int:
    """Other processes in this worker's process group (children, and descendants that left it
    but kept the group): the runner no longer signals the group of a parked worker."""
    me, group = os.getpid(), os.getpgid(0)
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        count += int(fields[2]) == group
    return count


def _sys_state() -> Tuple[Any, ...]:
    """The interpreter's hooks and streams a trial may replace."""
    return (
        tuple(map(id, (sys.stdin, sys.stdout, sys.stderr, sys.excepthook, threading.excepthook))),
        tuple(map(id, sys.meta_path)),
        tuple(map(id, sys.path_hooks)),
        sys.gettrace(),
        sys.getprofile(),
        sys.getrecursionlimit(),
        sys.getswitchinterval(),
    )


def _torch_settings() -> Tuple[Any, ...]:
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    backends = torch.backends
    return (
        torch.get_default_dtype(),
        str(torch.get_default_device()),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_num_threads(),
        torch.get_num_interop_threads(),
        torch.get_float32_matmul_precision(),
        torch.is_anomaly_enabled(),
        torch.is_anomaly_check_nan_enabled(),
        backends.cudnn.enabled,
        backends.cudnn.benchmark,
        backends.cudnn.deterministic,
        backends.cudnn.allow_tf32,
        backends.cuda.matmul.allow_tf32,
        backends.mkldnn.enabled,
    )


def _compile_counters() -> Tuple[Any, ...]:
    """Compared whole: a new counter means something was compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", {})
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in counters.items() if v))


def _loggers() -> Dict[str, Tuple[Any, ...]]:
    root = logging.getLogger()
    rows: Dict[str, Tuple[Any, ...]] = {"": (root.level, tuple(map(id, root.handlers)))}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            rows[name] = (logger.level, logger.disabled, logger.propagate, tuple(map(id, logger.handlers)))
    return rows


def _bindings() -> Dict[str, Dict[str, Tuple[int, int]]]:
    """Each watched module's attributes but submodules: the id of what each is bound to, and
    the size of a dict, list or set."""
    out = {}
    for name in WATCHED_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            out[name] = {
                k: (id(v), len(v) if isinstance(v, _CONTAINERS) else -1)
                for k, v in list(vars(module).items())
                if not isinstance(v, types.ModuleType)
            }
    return out
