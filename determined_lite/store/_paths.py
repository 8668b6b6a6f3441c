"""Where det-lite keeps its state, who may read it, and whether a recorded process is still the
one that is running.

Everything det-lite writes (the store, run directories, logs, checkpoints, TensorBoard files) is
private to the user: directories are created 0700 and files 0600, both further narrowed by a
stricter umask, never widened. det-lite's own processes (runner, launchers, workers) run with
the umask's group and other bits set (:func:`restrict_umask`, :func:`private_umask`), so files that
libraries create for them (SQLite's WAL, torch.save, TensorBoard) are private too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import Any, List, Mapping, Optional

DB_FILE = "det-lite.db"
DB_ENV = "DET_LITE_DB"  # where the store is, when not in the home
EXPERIMENTS_DIR = "experiments"
CONTEXT_SNAPSHOT = "context"
RUNNER_LOCK = "runner.lock"  # experiment/_lock.py: held by an experiment's runner and its trials
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077  # no permission for group and others


def list_names(path: str) -> List[str]:
    """The names in directory ``path``, sorted; none when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def det_lite_home() -> str:
    """The storage root: ``$DET_LITE_HOME``, default ``~/.det-lite`` (absolute, user-expanded)."""
    root = os.environ.get("DET_LITE_HOME") or os.path.join("~", ".det-lite")
    return os.path.abspath(os.path.expanduser(root))


def default_db_path() -> str:
    """``$DET_LITE_DB`` when set (e.g. a driver pod's persistent volume), else
    ``<home>/det-lite.db``: always a local disk of the machine that runs det-lite."""
    custom = os.environ.get(DB_ENV)
    return os.path.abspath(os.path.expanduser(custom)) if custom else os.path.join(det_lite_home(), DB_FILE)


def default_checkpoint_root(home: Optional[str] = None) -> str:
    """``<home>/checkpoints`` (used unless ``checkpoint_storage.host_path`` says otherwise)."""
    return os.path.join(home or det_lite_home(), "checkpoints")


def checkpoint_root(exp_conf: Mapping[str, Any]) -> str:
    """Where an experiment's checkpoints are written on this machine.

    ``checkpoint_storage.host_path[/storage_path]`` (``shared_fs``), ``container_path``
    (``directory``), else ``<home>/checkpoints`` (also the local copies of a cloud store's).
    """
    storage = exp_conf.get("checkpoint_storage") or {}
    if storage.get("container_path"):
        return str(storage["container_path"])
    host_path = storage.get("host_path")
    if not host_path:
        return default_checkpoint_root()
    storage_path = storage.get("storage_path")
    return os.path.join(host_path, storage_path) if storage_path else host_path


def tensorboard_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/tensorboard/experiment_<id>``: the experiment's TensorBoard logdir."""
    return os.path.join(home or det_lite_home(), "tensorboard", f"experiment_{int(experiment_id)}")


def experiment_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/experiments/<id>``: the experiment's run directory (specs, results, runner.log,
    the context snapshot)."""
    return os.path.join(home or det_lite_home(), EXPERIMENTS_DIR, str(int(experiment_id)))


def runner_lock_path(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/experiments/<id>/runner.lock``: the experiment's runner lock (``experiment/_lock.py``)."""
    return os.path.join(experiment_dir(experiment_id, home), RUNNER_LOCK)


def lock_held(path: str) -> bool:
    """Whether a process holds the ``flock`` on ``path`` (a missing file: no). A probe: when the
    lock is free it is taken and dropped at once; an unreadable file counts as held."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # drops the probe's lock with its open file
    return False


def context_snapshot_dir(experiment_id: int, home: Optional[str] = None) -> str:
    """``<home>/experiments/<id>/context``: the context directory as ``experiment create`` saw it."""
    return os.path.join(experiment_dir(experiment_id, home), CONTEXT_SNAPSHOT)


def process_token(pid: int) -> Optional[str]:
    """An id for the process ``pid`` that a later process with the same pid will not share: its
    start in clock ticks since boot (psutil's ``create_time`` less the boot time). A wall-clock
    step (NTP, a resumed VM) moves both, not their difference. None when it cannot be read
    (then only the pid is compared)."""
    import psutil  # here: ~30 ms, and most commands never check a process

    try:
        boot = psutil.boot_time()  # first: older psutil caches it for create_time
        started = psutil.Process(int(pid)).create_time()
    except psutil.Error:
        return None
    return str(round((started - boot) * os.sysconf("SC_CLK_TCK")))


def process_alive(pid: Optional[int], token: Optional[str] = None) -> bool:
    """Whether ``pid`` runs and is not a zombie; with ``token``, also that it is the same process."""
    import psutil

    if not pid or pid <= 0:
        return False
    try:
        if psutil.Process(int(pid)).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        pass  # exists, owned by someone else
    if token is not None:
        current = process_token(pid)
        if current is not None and current != token:
            return False
    return True


# --- permissions ------------------------------------------------------------------------------


def private_umask() -> int:
    """This process's umask with every group and other bit added (a stricter umask is kept)."""
    current = os.umask(PRIVATE_UMASK)
    os.umask(current)
    return current | PRIVATE_UMASK


def restrict_umask() -> int:
    """Make what this process creates from now on private (:func:`private_umask`); returns the
    previous umask. For det-lite's own processes only, never a user's."""
    return os.umask(private_umask())


def make_private_dirs(path: str) -> str:
    """``os.makedirs(path)`` with every directory it creates 0700 (less under a stricter umask);
    directories that exist are left as they are. Returns ``path``."""
    missing: List[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):  # a file where a directory goes: say so, as makedirs
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), directory) from None
    return path


def open_private(path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """``os.open`` creating a missing file 0600 (less under a stricter umask); returns the fd."""
    return os.open(path, flags, PRIVATE_FILE_MODE)


def restrict_existing(path: str) -> None:
    """Drop the group and other bits of ``path`` when this user owns it (a file or directory an
    older det-lite created world-readable); nothing when it is missing or someone else's."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or not st.st_mode & PRIVATE_UMASK:
        return
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~PRIVATE_UMASK)


def restrict_tree(path: str) -> None:
    """Drop the group and other bits of ``path`` and everything under it (symlinks untouched):
    copies keep their source's modes (``shutil.copytree``), whatever the umask."""
    restrict_existing(path)
    for directory, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            restrict_existing(os.path.join(directory, name))
