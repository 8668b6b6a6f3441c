"""A checkpoint as a ``.tar.gz`` for the dashboard's download button, through the storage layer.

``storage.fetch_checkpoint`` gives the checkpoint's local directory (downloaded from its
experiment's cloud store when the local copy is gone, with that layer's path checks); the
archive holds the regular files and directories under it as ``<uuid>/<relative path>``, never a
link nor anything whose real path is outside the directory, so the archive cannot make its
reader write outside the folder it is extracted in.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from typing import IO, Any, Tuple

from determined_lite.storage import StorageError, fetch_checkpoint
from determined_lite.store import NotFoundError, Store

SPOOL_BYTES = 16 << 20  # archives up to this size stay in memory, larger ones go to a temp file


def _inside(root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def _add_tree(archive: tarfile.TarFile, directory: str, prefix: str) -> int:
    """Add ``directory``'s regular files and folders under ``prefix``; the number of files."""
    root = os.path.realpath(directory)
    count = 0
    for current, folders, files in os.walk(root, followlinks=False):
        folders[:] = sorted(f for f in folders if not os.path.islink(os.path.join(current, f)))
        for name in sorted(files):
            path = os.path.join(current, name)
            if os.path.islink(path) or not os.path.isfile(path) or not _inside(root, path):
                continue
            arcname = os.path.join(prefix, os.path.relpath(path, root))
            archive.add(path, arcname=arcname, recursive=False)
            count += 1
    return count


def checkpoint_archive(store: Store, uuid: str) -> Tuple[IO[bytes], int, str]:
    """``(file positioned at 0, size in bytes, file name)`` of the checkpoint ``uuid``'s archive.
    ``NotFoundError`` for an unknown checkpoint or one whose files are gone."""
    found: Any = store.checkpoints.get(uuid)
    if found is None:
        raise NotFoundError(f"checkpoint {uuid} not found")
    try:
        directory = fetch_checkpoint(store, found)
    except (StorageError, FileNotFoundError) as e:
        raise NotFoundError(f"checkpoint {uuid}: {e}") from None
    if not os.path.isdir(directory):
        raise NotFoundError(f"checkpoint {uuid}'s directory {directory} is missing")
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    with tarfile.open(fileobj=spool, mode="w:gz") as archive:
        _add_tree(archive, directory, str(found["uuid"]))
    size = spool.tell()
    spool.seek(0)
    return spool, size, f"{found['uuid']}.tar.gz"


__all__ = ["checkpoint_archive"]
