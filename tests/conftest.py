"""Shared test setup: the session gets a storage root of its own (``tests/home_guard.py``, before
any fixture: module-scoped ones write there) and the run fails if the user's own store changed;
every test gets its own storage root under tmp_path, and trial modules a test imports from a
context or checkpoint directory (``model_def`` ...) do not leak into the next.

The tiers: ``slow`` marks the distributed, example and benchmark tests (whole directories), every
test that declares a time limit of ``SLOW_LIMIT_S`` or more (end-to-end runs of the CLI or of
workers: ``pytest.mark.timeout(240)`` says the test is one), and tests marked ``slow`` by hand.
``pytest -m "not slow"`` is the fast tier. Time limits (pytest-timeout's) stretch with the
machine's load (``tests/timing.py``): a loaded machine is slower, not broken.

With pytest-xdist (``-n 3``) the groups of ``tests/schedule.py`` are handed out longest first (the
Ray modules share the group ``ray``: one worker, one cluster at a time). Each worker is a session
of its own here (its own fork servers and storage root); the controller's session checks the
user's store once all workers are done.
"""

import contextlib
import os
import pathlib
import shutil
import sys
import sysconfig
import tempfile
from typing import Iterator, List, Optional

import pytest

from tests import (
    home_guard,  # first: $DET_LITE_HOME is the session's before anything runs
    ray_cluster,
    schedule,
)
from tests.timing import budget, load_factor

TESTS = pathlib.Path(__file__).resolve().parent
SLOW_DIRS = {"distributed", "examples", "benchmarks"}
SLOW_LIMIT_S = 120
SHARED_RAY = "shared_ray_cluster"
DEFAULT_LIMIT_S = 300  # pyproject's pytest-timeout default

_INSTALLED = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_OURS = ("determined_lite", "determined", "tests")
# Fork servers (launch/_forkserver.py) live in a runtime directory of this session's own and stay
# FORKSERVER_IDLE_S without runners: a test's runs fork from the server an earlier test's runs
# started (~3.5 s of imports saved per run). The session ends them at its end (never another
# session's: they are found by that directory).
FORKSERVER_IDLE_S = "60"
_RUNTIME_DIR = tempfile.mkdtemp(prefix="dl-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME_DIR
os.environ["DET_LITE_FORKSERVER_IDLE_S"] = FORKSERVER_IDLE_S


@pytest.fixture(autouse=True)
def _det_lite_home(tmp_path, monkeypatch):
    """Point $DET_LITE_HOME at the test's tmp_path so nothing is written to ~/.det-lite."""
    home = tmp_path / "det-lite-home"
    monkeypatch.setenv("DET_LITE_HOME", str(home))
    monkeypatch.delenv("DET_LITE_DB", raising=False)  # the store is in the test's home
    # Slots are cores in tests, on a GPU machine too (a 1-GPU box would refuse their 2-slot
    # trials); the placement tests simulate GPUs with their own $DET_LITE_DEVICES, and
    # scripts/device_check_slots.py checks real ones.
    if "DET_LITE_DEVICES" not in os.environ:
        monkeypatch.setenv("DET_LITE_DEVICES", "")
    # Piped tables fit $COLUMNS when it is set: the tests' subprocesses get whole columns.
    # (GNU readline, which pytest loads, sets COLUMNS in the C environment alone: unset there too.)
    monkeypatch.delenv("COLUMNS", raising=False)
    os.unsetenv("COLUMNS")
    return home


@pytest.fixture(autouse=True)
def _forget_trial_modules():
    """Restore ``sys.path`` and forget modules imported from neither the environment nor this
    package (e.g. a checkpoint's ``code/model_def.py`` loaded with trust=True)."""
    path, before = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not file or name.split(".")[0] in _OURS:
            continue
        if not os.path.realpath(file).startswith(_INSTALLED):
            del sys.modules[name]


@pytest.fixture
def shared_ray_cluster() -> ray_cluster.TestCluster:
    """The session's 2-node Ray cluster (``tests/ray_cluster.py``): the tests that use it run one
    after another (``pytest_collection_modifyitems``) and the last one stops it."""
    return ray_cluster.shared()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Iterator[None]:
    """After the last test in a row that uses the shared Ray cluster, stop it."""
    try:
        return (yield)
    finally:
        if _uses_shared_ray(item) and (nextitem is None or not _uses_shared_ray(nextitem)):
            ray_cluster.stop_shared()


def _uses_shared_ray(item: pytest.Item) -> bool:
    return SHARED_RAY in getattr(item, "fixturenames", ())


def _declared_limit(item: pytest.Item) -> Optional[float]:
    """The time limit the test (or its module) declares with ``pytest.mark.timeout``."""
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker is not None and marker.args else None


def _top_dir(path: pathlib.Path) -> Optional[str]:
    """The directory under tests/ that ``path`` is in (None outside tests/)."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if parts else None


def _is_slow(item: pytest.Item) -> bool:
    declared = _declared_limit(item)
    return (
        _top_dir(pathlib.Path(str(item.path))) in SLOW_DIRS
        or (declared is not None and declared >= SLOW_LIMIT_S)
        or item.get_closest_marker("slow") is not None
    )


def pytest_ignore_collect(collection_path: pathlib.Path, config: pytest.Config) -> Optional[bool]:
    """The fast tier (exactly ``-m "not slow"``) does not even import the slow directories: their
    modules load scikit-learn, Horovod and the benchmark peers (several seconds on a loaded box)."""
    if config.getoption("markexpr", "").strip() != "not slow":
        return None
    return True if _top_dir(collection_path) in SLOW_DIRS else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark the slow tier, stretch every test's time limit by the machine's load, run the users
    of the shared Ray cluster in a row, and put the items in xdist's groups, longest first."""
    factor = load_factor()
    default = config.getoption("timeout", None) or config.getini("timeout") or DEFAULT_LIMIT_S
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
        if factor > 1:
            limit = _declared_limit(item) or float(default)
            if limit > 0:  # 0: no limit
                item.add_marker(pytest.mark.timeout(budget(limit)), append=False)
    schedule.assign_groups(items)
    users = [item for item in items if _uses_shared_ray(item)]
    if users:  # in a row, where the first one is
        first = items.index(users[0])
        others = [item for item in items if not _uses_shared_ray(item)]
        items[:] = others[:first] + users + others[first:]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        schedule.longest_first(items, _is_slow)


_RECORDER = schedule.Recorder()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RECORDER.add(report)


def _session_fork_servers() -> list:
    """The fork servers started in this session's runtime directory (their socket's path is in
    their command line: ``python -u -m determined_lite.launch._forkserver_serve FD PATH IDLE_S``)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if "determined_lite.launch._forkserver_serve" in argv and any(
            a.startswith(_RUNTIME_DIR + os.sep) for a in argv
        ):
            found.append(proc)
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """End the shared Ray cluster (a run stopped early, ``-x``) and this session's fork servers;
    then the user's store is unchanged, or the run fails."""
    ray_cluster.stop_shared()
    _stop_fork_servers()
    _RECORDER.save()
    home_guard.pytest_sessionfinish(session, exitstatus)


def _stop_fork_servers() -> None:
    """End the fork servers this session started (and their children), and their runtime
    directory."""
    import psutil

    servers = _session_fork_servers()
    procs = [c for s in servers for c in s.children(recursive=True)] + servers
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    shutil.rmtree(_RUNTIME_DIR, ignore_errors=True)
