"""A checkpoint's ``code/``: one link to its experiment's code, put on disk once per snapshot.

An experiment's context snapshot (``experiment create``) never changes, so its code is put on
disk once for every checkpoint of the experiment: ``<snapshot>/.det-lite-code/`` holds hard
links to the snapshot's files (those its manifest lists, not what a trial writes into its
working directory), made by the first checkpoint that needs it and flushed with one
``os.sync()``; each checkpoint's ``code/`` is a relative symbolic link to it. A checkpoint
therefore costs the same whatever the context holds (one link, nothing more to flush), and
removing one removes one link. Where the checkpoint root is on another filesystem than the
snapshot, or refuses symbolic links, each checkpoint gets a copy of its own
(:func:`~determined_lite.storage.copy_context`). Copies of a checkpoint (``checkpoint export``,
the Core API's ``download``) copy the code it links to, so they stand alone.
"""

from __future__ import annotations

import os
import secrets
import shutil
from typing import Callable, Optional, Sequence

from determined_lite._errors import is_disk_full
from determined_lite.storage._confine import check_links
from determined_lite.storage._context import (
    MAX_CONTEXT_BYTES,
    SNAPSHOT_MANIFEST,
    ContextError,
    copy_context,
    materialize,
    read_snapshot,
)
from determined_lite.storage._layout import CODE_DIR, fsync_dir

SEALED_CODE = ".det-lite-code"
Selector = Optional[Callable[[str], bool]]


def sealed_code(snapshot_dir: str) -> str:
    """``<snapshot_dir>/.det-lite-code/``, made now unless it exists (the files its manifest
    lists): staged under a name of its own and renamed, so that writers racing to make it
    (trials of one experiment) agree on one."""
    sealed = os.path.join(snapshot_dir, SEALED_CODE)
    if os.path.isdir(sealed) and not os.path.islink(sealed):
        return sealed
    files = read_snapshot(snapshot_dir)
    if files is None:
        raise ContextError(f"{snapshot_dir} is not a context snapshot (no {SNAPSHOT_MANIFEST})")
    staging = os.path.join(snapshot_dir, f"{SEALED_CODE}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        materialize(files, staging, hard_link=True, read_only=False)
        os.sync()  # one flush of the file system, not one fsync per file
        os.rename(staging, sealed)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if os.path.isdir(sealed) and not os.path.islink(sealed):
            return sealed  # another writer's rename won
        raise
    fsync_dir(snapshot_dir)
    return sealed


def checkpoint_code(
    source: str, dest: str, *, exclude: Sequence[str] = (), limit: Optional[int] = MAX_CONTEXT_BYTES
) -> None:
    """Put the context ``source`` into a checkpoint's ``code/`` at ``dest``: a relative symbolic
    link to a snapshot's sealed code when both are on one filesystem, else a copy
    (:func:`copy_context`: hard links to a snapshot, a plain directory or file copied)."""
    is_snapshot = os.path.isfile(os.path.join(source, SNAPSHOT_MANIFEST))
    parent = os.path.realpath(os.path.dirname(dest))
    if is_snapshot and os.stat(source).st_dev == os.stat(parent).st_dev:
        sealed = os.path.realpath(sealed_code(source))
        try:
            os.symlink(os.path.relpath(sealed, parent), dest)
            return
        except OSError as e:
            if is_disk_full(e):
                raise
            # a file system without symbolic links: a copy of its own
    copy_context(source, dest, exclude=exclude, limit=limit)


def code_reference(path: str) -> Optional[str]:
    """The sealed code that ``path`` (a checkpoint's ``code``) links to; None when it is not such
    a link (a directory, a link to anything else)."""
    if not os.path.islink(path):
        return None
    target = os.path.realpath(path)
    if os.path.basename(target) != SEALED_CODE or not os.path.isfile(os.path.join(target, SNAPSHOT_MANIFEST)):
        return None
    return target


def copy_checkpoint(source: str, dest: str, selector: Selector = None) -> None:
    """Copy the checkpoint directory ``source`` into ``dest`` (made when missing) so that it stands
    alone: files copied, symbolic links copied as links (never followed), and a ``code`` link to
    sealed code copied as the files it links to. ``selector``: which files (relative paths with
    ``/``) to copy, as Determined's ``download(selector=...)``; None: all, empty directories too.
    A link that would point outside the copy is refused before anything is written
    (:class:`~determined_lite.storage.UnsafeNameError`)."""
    code = os.path.join(source, CODE_DIR)
    sealed = code_reference(code)
    check_links(source, source, skip=lambda path: path == code and sealed is not None)
    if sealed is not None:
        check_links(sealed, source)
    _copy_tree(source, dest, selector, "")
    if sealed is not None:
        _copy_tree(sealed, os.path.join(dest, CODE_DIR), selector, CODE_DIR + "/")


def _copy_tree(source: str, dest: str, selector: Selector, prefix: str) -> None:
    os.makedirs(dest, exist_ok=True)
    for parent, dirs, files in os.walk(source):
        rel_parent = os.path.relpath(parent, source)
        for name in dirs + files:
            path = os.path.join(parent, name)
            rel = name if rel_parent == "." else os.path.join(rel_parent, name)
            target = os.path.join(dest, rel)
            chosen = selector is None or selector(prefix + rel.replace(os.sep, "/"))
            if os.path.islink(path):
                if prefix == "" and rel == CODE_DIR and code_reference(path) is not None:
                    continue  # copied as files by the caller
                if chosen:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    os.symlink(os.readlink(path), target)
            elif name in files:
                if chosen:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy2(path, target, follow_symlinks=False)
            elif selector is None:
                os.makedirs(target, exist_ok=True)
