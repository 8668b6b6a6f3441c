"""``core_context.checkpoint``: checkpoints of a Core API script in det-lite's checkpoint root.

A checkpoint is a directory ``<root>/<uuid>/`` like a class trial's: written under
``.tmp-<uuid>/`` (its ``metadata.json`` naming the writer first), renamed when complete, made
private and durable, then registered in the store with the trial's retention policy applied
(``TrialReporter.checkpoint``). ``metadata`` must hold ``steps_completed`` (Determined's rule);
``metadata.json`` holds it plus det-lite's fields (``trial_id``, ``experiment_id``,
``total_batches``, ``store``, ``writer``), so ``det-lite checkpoint`` commands and the garbage
collection know it. Storage is a local (or shared) filesystem: ``restore_path`` and
``download`` read the directory in place or copy it, without collectives.

A storage id names a checkpoint and nothing else: a uuid (or a name of its characters) whose
directory is in the root itself (``storage.checkpoint_dir``); ``..``, ``.``, ``""``, paths, hidden
names and symbolic links planted in the root are refused with one line (``CheckpointIdError``).
``delete`` removes only checkpoints of the trial's own experiment (its ``metadata.json`` names
the experiment and store), and in local mode only checkpoints of no experiment. Every call is
noted on the trial: progress for the stall watchdog (``_calls.py``).
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import json
import os
import pathlib
import shutil
import uuid as uuidlib
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

import determined_lite
from determined_lite.core._calls import note_call
from determined_lite.storage import (
    METADATA_FILE,
    STORE_KEY,
    TMP_PREFIX,
    CheckpointIdError,
    checkpoint_dir,
    copy_checkpoint,
    make_durable,
    read_metadata_file,
)
from determined_lite.storage._layout import WRITER_KEY, writer_record
from determined_lite.store._paths import make_private_dirs, restrict_tree

Selector = Optional[Callable[[str], bool]]


def _copy_in(source: str, target: str, selector: Selector) -> None:
    """``upload``: the files of the script's directory ``source`` (a linked file's bytes)."""
    for directory, _, files in os.walk(source):
        for name in files:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, source)
            if selector is not None and not selector(relative):
                continue
            os.makedirs(os.path.join(target, os.path.dirname(relative)), exist_ok=True)
            shutil.copy2(path, os.path.join(target, relative))


class DownloadMode(enum.Enum):
    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class CheckpointContext:
    """``core_context.checkpoint``.

    ``trial``: the worker's ``launch._script.ScriptTrial`` (None in local mode: checkpoints are
    written to ``root`` and registered nowhere).
    """

    def __init__(self, distributed: Any, root: str, trial: Any = None, storage: Any = None) -> None:
        self._dist = distributed
        self._root = root
        self._trial = trial
        self._storage = storage  # a cloud CheckpointStorage: reads fetch a missing local copy

    def _path(self, storage_id: str, call: str) -> str:
        """The directory of checkpoint ``storage_id`` in the root (``CheckpointIdError`` for an
        id that is not a checkpoint's, ``FileNotFoundError`` for one that is not there); the
        call is noted on the trial first."""
        note_call(self._trial, f"core_context.checkpoint.{call}({storage_id!r})")
        try:
            return checkpoint_dir(self._root, storage_id)
        except CheckpointIdError:
            raise
        except FileNotFoundError:
            if self._storage is None or call == "delete":
                raise
            return self._storage.local_copy(storage_id)

    def _check_deletable(self, storage_id: str, path: str) -> None:
        """``PermissionError`` unless the checkpoint is the trial's experiment's (local mode: of no
        experiment), as its ``metadata.json`` says: a script never deletes another's checkpoints."""
        own = self._trial.checkpoint_identity() if self._trial is not None else {}
        meta = read_metadata_file(path)
        mine = (own.get("experiment_id"), own.get(STORE_KEY))
        theirs = (meta.get("experiment_id"), meta.get(STORE_KEY)) if meta is not None else None
        if theirs == mine:
            return
        owner = "has no metadata.json" if theirs is None else f"belongs to {_owner(*theirs)}"
        rule = (
            f"a trial deletes only its own experiment's checkpoints ({_owner(*mine)})"
            if self._trial is not None
            else "outside det-lite's trials a script deletes only checkpoints of no experiment"
        )
        raise PermissionError(f"checkpoint {storage_id} {owner}: not deleted; {rule}")

    def _metadata(self, storage_id: str, metadata: Dict[str, Any]) -> Dict[str, Any]:
        if "steps_completed" not in metadata:
            raise ValueError("checkpoint metadata must include 'steps_completed' (as in Determined)")
        meta = dict(metadata)
        meta.update(
            uuid=storage_id,
            total_batches=int(metadata["steps_completed"]),
            framework="determined_lite.core",
            determined_lite_version=determined_lite.__version__,
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        )
        meta[WRITER_KEY] = writer_record()
        if self._trial is not None:
            meta.update(self._trial.checkpoint_identity())
        return meta

    @contextlib.contextmanager
    def _store(
        self, metadata: Optional[Dict[str, Any]], shard: bool, call: str
    ) -> Iterator[Tuple[pathlib.Path, str]]:
        if not shard and self._dist.rank != 0:
            raise RuntimeError(
                f"cannot call store_path(shard=False) or upload(shard=False) from a non-chief worker "
                f"(rank={self._dist.rank})"
            )
        storage_id = str(uuidlib.uuid4()) if self._dist.rank == 0 else None
        if shard:
            storage_id = self._dist.broadcast(storage_id)
            metadata = _merged(self._dist.allgather(metadata or {}))
        assert storage_id is not None
        note_call(self._trial, f"core_context.checkpoint.{call}() of {storage_id}", every_rank=shard)
        meta = self._metadata(storage_id, metadata or {}) if self._dist.rank == 0 else {}
        tmp = os.path.join(self._root, f"{TMP_PREFIX}{storage_id}")
        final = os.path.join(self._root, storage_id)
        if self._dist.rank == 0:
            make_private_dirs(self._root)
            os.makedirs(tmp)
            _write_json(os.path.join(tmp, METADATA_FILE), meta)
        if shard:
            self._dist.barrier()
        try:
            yield pathlib.Path(tmp), storage_id
            if shard:
                self._dist.barrier()
        except BaseException:
            if self._dist.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._dist.rank == 0:
            _write_json(os.path.join(tmp, METADATA_FILE), meta)  # the script may have written one
            restrict_tree(tmp)
            os.rename(tmp, final)
            make_durable(final)
            if self._trial is not None:
                self._trial.note_checkpoint(storage_id, final, meta)
        if shard:
            self._dist.barrier()

    def store_path(self, metadata: Optional[Dict[str, Any]] = None, *, shard: bool = False) -> Any:
        """A context manager giving ``(path, storage_id)``: write the checkpoint's files into
        ``path``; on exit it is stored and registered. ``shard=True``: every rank calls it and
        writes into the same directory."""
        return self._store(metadata, shard, "store_path")

    def upload(
        self,
        ckpt_dir: Optional[Union[str, "os.PathLike[str]"]],
        metadata: Optional[Dict[str, Any]] = None,
        *,
        shard: bool = False,
        selector: Selector = None,
    ) -> str:
        """Store a copy of ``ckpt_dir`` as a new checkpoint; returns its ``storage_id``."""
        if ckpt_dir is None and not shard:
            raise RuntimeError("cannot call .upload(ckpt_dir=None, shard=False), which would do nothing")
        with self._store(metadata, shard, "upload") as (path, storage_id):
            if ckpt_dir is not None:
                _copy_in(os.fspath(ckpt_dir), str(path), selector)
        return storage_id

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> Iterator[pathlib.Path]:
        """The directory of checkpoint ``storage_id`` (read in place; do not modify it)."""
        DownloadMode(download_mode)
        yield pathlib.Path(self._path(storage_id, "restore_path"))

    def download(
        self,
        storage_id: str,
        ckpt_dir: Union[str, "os.PathLike[str]"],
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector = None,
    ) -> None:
        """Copy checkpoint ``storage_id`` into ``ckpt_dir`` (symbolic links in it copied as links,
        never followed; code a class trial's checkpoint links to copied as files)."""
        DownloadMode(download_mode)
        copy_checkpoint(self._path(storage_id, "download"), os.fspath(ckpt_dir), selector)

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        """The checkpoint's ``metadata.json``."""
        with open(os.path.join(self._path(storage_id, "get_metadata"), METADATA_FILE)) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}

    def delete(self, storage_id: str) -> None:
        """Remove checkpoint ``storage_id`` of the trial's experiment (and forget it in the store)."""
        path = self._path(storage_id, "delete")
        self._check_deletable(storage_id, path)
        if self._trial is not None:
            self._trial.forget_checkpoint(storage_id)
        if self._storage is not None:
            self._storage.delete(storage_id)
        shutil.rmtree(path)


def checkpoint_root_of(context: CheckpointContext) -> str:
    """The directory ``context`` writes its checkpoints to (the batch processor's outputs go
    there too); not part of Determined's ``CheckpointContext``."""
    return context._root


def _owner(experiment_id: Any, store: Any) -> str:
    if experiment_id is None:
        return "no experiment"
    return f"experiment {experiment_id}" + (f" of the store {store}" if store else "")


def _merged(all_metadata: Any) -> Dict[str, Any]:
    """Every rank's metadata in one dict; a key given different values is an error."""
    out: Dict[str, Any] = {}
    for metadata in all_metadata:
        for key, value in metadata.items():
            if key in out and out[key] != value:
                raise ValueError(
                    f"checkpoint metadata {key!r} differs between workers: {out[key]!r} != {value!r}"
                )
            out[key] = value
    return out


def _write_json(path: str, data: Dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
