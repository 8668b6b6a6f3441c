"""Determined's command forms of ``entrypoint``: a trial class or a script, plus an engine.

``entrypoint`` in Determined's launcher form (a shell string or an argv list), e.g.
``python3 -m determined.launch.torch_distributed --trial model_def:Trial``, is read as the trial
class ``model_def:Trial`` plus the engine it implies (``resources.distributed_backend``: ``torch``
for ``torch_distributed``, ``horovod`` for ``horovod``). A script (``python3 train.py ARGS``,
``python3 -m package.train ARGS``, alone or after a launcher: ``python3 -m
determined.launch.torch_distributed python3 train.py``) is stored as its own command
(``python3 train.py ARGS``, shell-quoted) and read back by :func:`script_command`.
``normalize_launcher`` rewrites the raw config before validation, so everything downstream sees
``module:Class`` or the script's command. Options that only steer Determined's cluster launcher
(``--autohorovod``) are dropped; anything det-lite cannot honour (DeepSpeed,
``torchrun``/``horovodrun`` overrides, unknown options) is an error.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import Any, Dict, List, Optional, Sequence, Tuple

from determined_lite.config._errors import FieldError, describe
from determined_lite.config._plugins import ENGINES, EngineRecord

TRIAL_CLASS = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
# Determined's launcher module -> det-lite's engine record (resources.distributed_backend).
_LAUNCHERS: Dict[str, EngineRecord] = {e.determined_launcher: e for e in ENGINES.values()}
_UNSUPPORTED_LAUNCHERS = {
    "determined.launch.deepspeed": "DeepSpeed trials",
    "determined.launch.autodeepspeed": "DeepSpeed trials",
    "determined.launch.tensorflow": "TensorFlow/Keras trials",
}
_LAUNCHER_FORMS = " or ".join(
    f"'python3 -m {e.determined_launcher}{''.join(f' [{f}]' for f in sorted(e.determined_flags))}' "
    f"({e.name} backend)"
    for e in sorted(ENGINES.values(), key=lambda e: e.name, reverse=True)
)
SUPPORTED_ENTRYPOINTS = (
    "expected 'package.module:TrialClass', a script ('python3 train.py [ARGS]' or 'python3 -m "
    f"package.module [ARGS]'), or either after {_LAUNCHER_FORMS}, "
    "a class as '--trial package.module:TrialClass'"
)
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# Python options a script command may carry; det-lite runs the script in its worker, where
# output is unbuffered already.
_PYTHON_FLAGS = frozenset({"-u"})


@dataclasses.dataclass(frozen=True)
class ScriptCommand:
    """A script entrypoint: ``path`` (a file in the context directory) or ``module`` (run as
    ``python -m``), and the arguments it gets as ``sys.argv[1:]``."""

    path: Optional[str]
    module: Optional[str]
    args: Tuple[str, ...]

    @property
    def argv0(self) -> str:
        """``sys.argv[0]`` of the script, as Python sets it."""
        return self.path if self.path is not None else str(self.module)

    def command(self) -> str:
        """The stored form: ``python3 PATH ARGS`` or ``python3 -m MODULE ARGS``, shell-quoted."""
        head = ["python3", self.path] if self.path is not None else ["python3", "-m", str(self.module)]
        return " ".join(shlex.quote(a) for a in head + list(self.args))


def script_command(entrypoint: str) -> Optional[ScriptCommand]:
    """The script an entrypoint (as stored) runs; None for a trial class."""
    if TRIAL_CLASS.fullmatch(entrypoint.strip()):
        return None
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return None
    return _script(argv)


def _script(argv: Sequence[str]) -> Optional[ScriptCommand]:
    """``argv`` read as a Python script command (``python3 [-u] FILE|-m MODULE ARGS``, or a
    ``*.py`` file alone), or None."""
    if not argv:
        return None
    if argv[0].endswith(".py"):
        return ScriptCommand(argv[0], None, tuple(argv[1:]))
    if not _PYTHON.fullmatch(os.path.basename(argv[0])):
        return None
    rest = list(argv[1:])
    while rest and rest[0] in _PYTHON_FLAGS:
        rest.pop(0)
    if not rest:
        return None
    if rest[0] == "-m":
        module = rest[1] if len(rest) > 1 else ""
        if not module or module.startswith("determined.") or not re.fullmatch(r"[A-Za-z_][\w.]*", module):
            return None
        return ScriptCommand(None, module, tuple(rest[2:]))
    if rest[0].startswith("-"):
        return None
    return ScriptCommand(rest[0], None, tuple(rest[1:]))


def normalize_launcher(raw: Dict[str, Any]) -> Dict[str, Any]:
    """``raw`` (a copy is returned) with a launcher ``entrypoint`` replaced by its trial class and
    ``resources.distributed_backend`` set to the launcher's engine when not given.

    Raises FieldError (at ``entrypoint``) for forms det-lite cannot run, and when the launcher
    and an explicit ``resources.distributed_backend`` disagree. A plain ``module:Class`` (and any
    value that is not a command) is left for the schema to check.
    """
    argv = _argv(raw.get("entrypoint"))
    if argv is None:
        return raw
    trial, launcher = parse_launcher(argv)
    out = dict(raw)
    out["entrypoint"] = trial
    if launcher is None:
        return out
    backend = _LAUNCHERS[launcher].name
    resources = out.get("resources")
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        return out  # the schema reports the bad section
    explicit = resources.get("distributed_backend")
    if explicit in ENGINES and explicit != backend:
        raise FieldError(
            ("entrypoint",),
            f"{launcher} runs the {backend!r} backend, but resources.distributed_backend is "
            f"{explicit!r}; make resources.distributed_backend {backend!r} or remove it "
            "(or use the other launcher)",
        )
    if explicit is None:
        out["resources"] = {**resources, "distributed_backend": backend}
    return out


def _argv(value: Any) -> Optional[List[str]]:
    """The entrypoint as an argv list, or None when it is not a command (a class, or a bad type)."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise FieldError(("entrypoint", i), f"expected a string, got {describe(item)}")
        if not value:
            raise FieldError(("entrypoint",), f"{SUPPORTED_ENTRYPOINTS}, got []")
        return list(value)
    if isinstance(value, str) and len(value.split()) > 1:
        try:
            return shlex.split(value)  # Determined runs a string entrypoint with ``sh -c``
        except ValueError as e:
            raise FieldError(("entrypoint",), f"cannot read the command {describe(value)}: {e}") from None
    return None


def parse_launcher(argv: Sequence[str]) -> Tuple[str, Optional[str]]:
    """``(trial class, launcher module)`` of a launcher command; ``(trial class, None)`` for
    ``["module:Class"]``.

    Raises FieldError at ``entrypoint`` saying what det-lite supports for any other command.
    """
    command = " ".join(shlex.quote(a) for a in argv)
    if len(argv) == 1 and TRIAL_CLASS.fullmatch(argv[0].strip()):
        return argv[0].strip(), None
    script = _script(argv)
    if script is not None:
        return script.command(), None
    python = _PYTHON.fullmatch(os.path.basename(argv[0])) and len(argv) >= 2
    if not python or argv[1] != "-m":
        raise FieldError(
            ("entrypoint",), f"{command!r} is not a trial det-lite can run; {SUPPORTED_ENTRYPOINTS}"
        )
    module = argv[2] if len(argv) > 2 else ""
    if module not in _LAUNCHERS:
        if module in _UNSUPPORTED_LAUNCHERS:
            what = f"{module} launches {_UNSUPPORTED_LAUNCHERS[module]}, which det-lite does not run"
        elif module.startswith("determined."):
            what = f"the launcher {module} is not supported by det-lite"
        else:
            what = f"{module or 'python -m'!r} is not a Determined trial launcher"
        raise FieldError(("entrypoint",), f"{what}; {SUPPORTED_ENTRYPOINTS}")
    return _launcher_trial(module, list(argv[3:])), module


def _launcher_trial(module: str, args: List[str]) -> str:
    """The ``--trial`` class (or the script's stored command) of ``python3 -m MODULE ARGS``,
    with Determined's argument rules."""
    args = _without_overrides(module, args)
    allowed = sorted({"--trial"} | _LAUNCHERS[module].determined_flags)
    trial: Optional[str] = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--trial" or arg.startswith("--trial="):
            if trial is not None:
                raise FieldError(("entrypoint",), f"{module}: --trial is given twice")
            trial, i = _trial_option(module, args, i)
        elif arg in _LAUNCHERS[module].determined_flags:
            pass  # only changes how Determined's cluster starts the workers
        elif arg.startswith("-"):
            raise FieldError(
                ("entrypoint",),
                f"{module}: unknown launcher option {arg!r} (det-lite accepts {', '.join(allowed)})",
            )
        else:
            return _launched_script(module, args[i:], trial)
        i += 1
    if trial is None:
        raise FieldError(("entrypoint",), f"{module} needs --trial package.module:TrialClass")
    return trial


def _without_overrides(module: str, args: List[str]) -> List[str]:
    """``args`` after a ``--``; what comes before it (the launcher's own overrides) is an error."""
    if "--" not in args:
        return args
    split = args.index("--")
    overrides, args = args[:split], args[split + 1 :]
    if overrides:
        raise FieldError(
            ("entrypoint",),
            f"{' '.join(overrides)!r} before '--' overrides {_LAUNCHERS[module].tool}'s arguments on a "
            f"Determined cluster; det-lite starts the workers itself from resources.* "
            "(slots_per_trial, hosts, ddp_options): remove the overrides",
        )
    return args


def _trial_option(module: str, args: List[str], i: int) -> Tuple[str, int]:
    """The class of ``--trial CLASS`` or ``--trial=CLASS`` at ``args[i]``, and the index it ends at."""
    if args[i] == "--trial":
        if i + 1 >= len(args):
            raise FieldError(("entrypoint",), f"{module}: --trial needs 'package.module:TrialClass'")
        i += 1
        trial = args[i]
    else:
        trial = args[i].split("=", 1)[1]
    if not TRIAL_CLASS.fullmatch(trial):
        raise FieldError(
            ("entrypoint",), f"{module}: --trial expects 'package.module:TrialClass', got {trial!r}"
        )
    return trial, i


def _launched_script(module: str, args: List[str], trial: Optional[str]) -> str:
    """The stored command of the script the launcher runs (``args``: from its first word)."""
    text = " ".join(shlex.quote(a) for a in args)
    if trial is not None:
        raise FieldError(("entrypoint",), f"{module}: extra arguments after --trial {trial}: {text!r}")
    script = _script(args)
    if script is None:
        raise FieldError(
            ("entrypoint",),
            f"{module} runs {text!r}, which det-lite cannot run: expected a Python script "
            "('python3 train.py [ARGS]', 'python3 -m package.module [ARGS]') or "
            "--trial package.module:TrialClass",
        )
    return script.command()
