"""A checkpoint root on disk, read without torch: ``<uuid>/`` complete checkpoints, ``.tmp-<uuid>/``
ones being written, who wrote them, how many bytes they hold, and flushing them to disk.

A storage id names a checkpoint and nothing else: a uuid (det-lite's and Determined's form) or a
name of the same characters, whose directory sits in the root itself, not behind a symbolic link
(:func:`checkpoint_dir`); ``..``, ``.``, ``""``, paths, hidden names and links are refused with
one line.

A checkpoint's ``metadata.json`` names the process that wrote it (``writer``: host, pid, start
token) and, for experiment trials, the store that should register it (``store``). Garbage
collection uses both: it never removes a directory whose writer may still be running, and
leaves alone checkpoints of other stores sharing the root.

A directory to delete at once whatever it holds is renamed aside (``.det-lite-deleted-...``,
hidden) and its files removed by a process of its own (``move_aside``, ``remove_in_background``).
A directory written next to its place is renamed into it whole (``publish_dir``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

from determined_lite._errors import CheckpointNotFound, DiskFullError, is_disk_full
from determined_lite.store._paths import process_alive, process_token

STATE_FILE = "state_dict.pth"
METADATA_FILE = "metadata.json"
CODE_DIR = "code"
TMP_PREFIX = ".tmp-"
# A directory being deleted: renamed out of its place at once, its files removed in the background.
DELETED_PREFIX = ".det-lite-deleted-"
WRITER_KEY = "writer"
STORE_KEY = "store"
# A temporary directory whose writer cannot be checked (another host, no metadata yet) is left
# alone this long after its last change.
TMP_GRACE_S = 3600.0
# A checkpoint's name in its root: letters, digits, '-' and '_', starting with a letter or digit
# (a uuid is one): never '.', '..', '', a path, a hidden or temporary name.
_STORAGE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,254}")


class CheckpointIdError(CheckpointNotFound, FileNotFoundError, ValueError):
    """A storage id that cannot name a checkpoint: not a uuid, or a symbolic link in the root.
    No checkpoint has that name: Determined's ``CheckpointNotFound``, and ``FileNotFoundError``
    as for a uuid that is not there."""


def is_checkpoint_id(text: Any) -> bool:
    """Whether ``text`` can be a checkpoint's storage id (a uuid, or a name of its characters)."""
    return isinstance(text, str) and _STORAGE_ID.fullmatch(text) is not None


def checkpoint_dir(root: str, storage_id: Any) -> str:
    """The directory of checkpoint ``storage_id`` in ``root``: :class:`CheckpointIdError` when the
    id cannot be a checkpoint's or names a symbolic link, ``FileNotFoundError`` when it is not
    there. The path returned never leaves ``root``."""
    if not is_checkpoint_id(storage_id):
        raise CheckpointIdError(
            f"{storage_id!r} is not a checkpoint's storage id: checkpoints are named by their uuid "
            "(e.g. 0b9ec4a6-3a5e-4b8e-9a6c-3f1d2b7c8e90), never by a path or a hidden name"
        )
    path = os.path.join(root, storage_id)
    if os.path.islink(path):
        raise CheckpointIdError(
            f"checkpoint {storage_id}: {path} is a symbolic link, not a checkpoint directory of {root}"
        )
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint {storage_id!r} in {root}")
    return path


def writer_record() -> Dict[str, Any]:
    """This process, as ``metadata.json`` records its writer."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "token": process_token(pid)}


def writer_may_be_alive(
    metadata: Optional[Dict[str, Any]], mtime: float, now: Optional[float] = None, grace: float = TMP_GRACE_S
) -> bool:
    """Whether the process that wrote a directory may still be writing or registering it: its
    recorded writer runs on this host, or (writer unknown or elsewhere) it changed within ``grace``."""
    writer = (metadata or {}).get(WRITER_KEY)
    if isinstance(writer, dict) and writer.get("host") == socket.gethostname():
        pid = writer.get("pid")
        return isinstance(pid, int) and process_alive(pid, writer.get("token"))
    return (time.time() if now is None else now) - mtime < grace


@dataclasses.dataclass
class RootEntry:
    """One directory in a checkpoint root."""

    path: str
    uuid: str
    temporary: bool  # .tmp-<uuid>: being written, or left by a process that died
    mtime: float

    @functools.cached_property
    def metadata(self) -> Optional[Dict[str, Any]]:
        """Its ``metadata.json`` (read on first use), None when missing or unreadable."""
        return read_metadata_file(self.path)


def read_metadata_file(directory: str) -> Optional[Dict[str, Any]]:
    """``directory/metadata.json`` as a dict, or None when missing or not a JSON object."""
    try:
        with open(os.path.join(directory, METADATA_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def root_entries(root: str) -> List[RootEntry]:
    """The checkpoint directories in ``root`` (none when it does not exist); links are skipped."""
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries = []
    for name in names:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        temporary = name.startswith(TMP_PREFIX)
        if name.startswith(".") and not temporary:
            continue
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        uuid = name[len(TMP_PREFIX) :] if temporary else name
        entries.append(RootEntry(path, uuid, temporary, mtime))
    return entries


def disk_usage(paths: Iterable[str]) -> int:
    """Bytes allocated on disk under ``paths``, each file counted once however many hard links
    name it (``du`` semantics); links are not followed."""
    seen = set()
    total = 0
    for top in paths:
        for parent, dirs, files in os.walk(top):
            for name in [parent] + [os.path.join(parent, n) for n in dirs + files]:
                try:
                    st = os.lstat(name)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (names created or renamed in it) to disk."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def fsync_tree(path: str) -> None:
    """Flush every regular file under ``path`` to disk."""
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                continue
            with open(full, "rb") as f:
                os.fsync(f.fileno())


def make_durable(path: str) -> None:
    """Flush a checkpoint directory (its files and its name) to disk.

    When the disk is full the checkpoint may never reach it: it is removed (a directory named
    by a bare uuid is always complete) and :class:`DiskFullError` raised.
    """
    root = os.path.dirname(os.path.normpath(path))
    try:
        fsync_tree(path)
        fsync_dir(root)
    except OSError as e:
        if not is_disk_full(e):
            raise
        shutil.rmtree(path, ignore_errors=True)
        raise DiskFullError(
            root, f"checkpoint {os.path.basename(path)} could not be flushed to disk and was removed"
        ) from e


@contextlib.contextmanager
def publish_dir(staging: str, target: str) -> Iterator[str]:
    """Yield ``staging`` to fill, then rename it to ``target`` whole; a ``target`` another process
    put there first wins. ``staging`` (on ``target``'s file system) is removed in any case."""
    try:
        yield staging
        try:
            os.rename(staging, target)
        except OSError:
            if not os.path.isdir(target):  # else another writer got there first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def move_aside(path: str) -> str:
    """Rename ``path`` to ``.det-lite-deleted-<name>-<hex>`` in its directory: out of its place in
    one call whatever it holds (a rename never crosses a file system); the new path."""
    parent, name = os.path.split(os.path.normpath(path))
    target = os.path.join(parent, f"{DELETED_PREFIX}{name}-{secrets.token_hex(4)}")
    os.rename(path, target)
    return target


def remove_in_background(paths: Sequence[str]) -> None:
    """Remove ``paths`` (moved aside) in a process of their own that outlives the caller:
    unlinking is the file system's work (about 1 ms a file on a busy disk: 10,000 files of a
    context snapshot took 20 s), which a command need not wait for. What a killed remover
    leaves, ``checkpoint gc`` removes. Where ``rm`` cannot start, they are removed here."""
    if not paths:
        return
    try:
        subprocess.Popen(
            ["rm", "-rf", "--", *paths],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped by the terminal's Ctrl-C or hangup
        )
    except OSError:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
