"""The plug-in registries (config/_plugins.py): every engine record and executor entry is
complete, and the config accepts exactly the registered names."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from determined_lite.config import ConfigError
from determined_lite.config._launcher import SUPPORTED_ENTRYPOINTS, normalize_launcher
from determined_lite.config._plugins import (
    DEFAULT_ENGINE,
    DEFAULT_EXECUTOR,
    ENGINES,
    EXECUTORS,
    SINGLE_ENGINE,
)
from determined_lite.distributed._base import DistributedContext, engine
from determined_lite.launch._engines import engine_problem, launcher
from determined_lite.launch._executor import Executor, executor_class
from determined_lite.runtime._spec import BACKENDS
from determined_lite.searcher import validate_config

BASE = {
    "entrypoint": "model_def:T",
    "hyperparameters": {"global_batch_size": 2},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
}


def _config(**resources):
    return {**BASE, "resources": resources}


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engine_record_is_complete(name):
    record = ENGINES[name]
    assert record.name == name
    context = engine(name)  # its module imported from the record
    assert issubclass(context, DistributedContext) and context.backend == name
    assert context.__module__ == record.context_module
    module = launcher(name)
    assert module.__name__ == record.launcher_module
    assert callable(module.command) and callable(module.problem)
    assert engine_problem(name, 1) is None  # one slot is one plain process
    assert record.stop_signals
    assert all(isinstance(getattr(signal, s), signal.Signals) for s in record.stop_signals)
    assert record.tool and record.determined_launcher.startswith("determined.launch.")
    assert f"python3 -m {record.determined_launcher}" in SUPPORTED_ENTRYPOINTS
    # Determined's launcher form implies the engine.
    raw = normalize_launcher({"entrypoint": f"python3 -m {record.determined_launcher} --trial m:T"})
    assert raw["entrypoint"] == "m:T" and raw["resources"]["distributed_backend"] == name


def test_the_worker_backends_are_single_plus_the_engines():
    assert BACKENDS == (SINGLE_ENGINE, *ENGINES)
    assert engine(SINGLE_ENGINE).backend == SINGLE_ENGINE
    assert DEFAULT_ENGINE in ENGINES and DEFAULT_EXECUTOR in EXECUTORS


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_every_executor_entry_names_an_executor(name):
    cls = executor_class(name)
    assert issubclass(cls, Executor) and cls.name == name
    assert cls.__module__ == EXECUTORS[name]


@pytest.mark.parametrize(
    ("field", "names"), [("distributed_backend", ENGINES), ("executor", EXECUTORS)]
)
def test_the_config_accepts_exactly_the_registered_names(field, names):
    for name in names:
        assert validate_config(_config(**{field: name})).to_dict()["resources"][field] == name
    with pytest.raises(ConfigError) as e:
        validate_config(_config(**{field: "nope"}))
    assert e.value.path == f"resources.{field}"
    for name in names:
        assert repr(name) in e.value.message
    assert e.value.message.endswith("got 'nope'")


def test_unknown_names_are_errors_naming_the_choices():
    with pytest.raises(ValueError, match="unknown distributed backend 'mpi'; expected one of single, "):
        engine("mpi")
    with pytest.raises(ValueError, match="unknown executor 'slurm'; expected one of local"):
        executor_class("slurm")
    with pytest.raises(ValueError, match="unknown distributed backend 'mpi'"):
        launcher("mpi")


def test_the_registry_imports_no_plug_in():
    # The registry names modules; reading it imports none of them (nor torch): an executor
    # with an optional dependency (Ray) costs nothing unless a config names it.
    code = (
        "import sys, determined_lite.config._plugins as p; "
        "print(sorted(m for m in sys.modules if m.startswith(('determined_lite.launch', "
        "'determined_lite.distributed', 'torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
