"""An experiment's context snapshot: read and copied once by ``experiment create``.

The context directory is read (``.detignore``, links, size limit: ``storage.read_context``) and
copied into a staging directory beside the run directories before the experiment is recorded,
then renamed to ``<home>/experiments/<id>/context/``. Trials run from the snapshot, so editing
the original while an experiment is paused changes nothing it runs, and checkpoints link to
its code (put on disk once: ``storage/_code.py``). A failure at any step leaves no experiment and no snapshot.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Mapping

from determined_lite._errors import DiskFullError, is_disk_full
from determined_lite.storage import TMP_PREFIX, read_context, snapshot_context
from determined_lite.store._paths import (
    CONTEXT_SNAPSHOT,
    EXPERIMENTS_DIR,
    checkpoint_root,
    context_snapshot_dir,
    det_lite_home,
    make_private_dirs,
    restrict_tree,
)

STAGING_PREFIX = f"{TMP_PREFIX}{CONTEXT_SNAPSHOT}-"


def stage_context(context_dir: str, config: Mapping[str, Any]) -> str:
    """Snapshot ``context_dir`` into a new staging directory; returns the staging directory
    (the snapshot is its ``context/``). Raises ``storage.ContextError`` for a context det-lite
    refuses, before anything is written."""
    home = det_lite_home()
    found = read_context(context_dir, exclude=(home, checkpoint_root(config)))
    for rel, target in sorted(found.copied_links.items()):
        print(f"context: {rel} links outside the context directory, to {target}: its content is copied")
    parent = os.path.join(home, EXPERIMENTS_DIR)
    make_private_dirs(parent)
    staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=parent)  # 0700
    try:
        snapshot_context(found, staged_snapshot(staging), source=os.path.abspath(context_dir))
        restrict_tree(staging)  # copies keep their source's modes: private like all of det-lite's files
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(home, f"cannot snapshot the context directory {context_dir}") from e
        raise
    return staging


def staged_snapshot(staging: str) -> str:
    """The snapshot inside a staging directory made by :func:`stage_context`."""
    return os.path.join(staging, CONTEXT_SNAPSHOT)


def install_context(staging: str, experiment_id: int) -> str:
    """Move a staged snapshot to the experiment's run directory; returns its path."""
    dest = context_snapshot_dir(experiment_id)
    make_private_dirs(os.path.dirname(dest))
    if os.path.lexists(dest):  # left by an earlier store file that was removed by hand
        shutil.rmtree(dest)
    os.rename(staged_snapshot(staging), dest)
    os.rmdir(staging)
    return dest
