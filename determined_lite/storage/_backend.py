"""Checkpoint storage: one fsspec filesystem for every ``checkpoint_storage`` type.

``shared_fs`` and ``directory`` are fsspec's local filesystem rooted where checkpoints are
written (``<host_path>/<storage_path>/<uuid>/``, ``<container_path>/<uuid>/``: Determined's
layout), so uploading is nothing and a checkpoint is its directory. ``s3``, ``gcs`` and
``azure`` are s3fs, gcsfs and adlfs (each an optional extra): a checkpoint is written locally,
in ``<home>/checkpoints/<uuid>/`` (the local copy), uploaded to ``<bucket>/<prefix>/<uuid>/``
and only then registered; reading one downloads it into the local copy when that is gone.
Credentials not in the config come from each cloud SDK's own places (environment, config files,
instance roles); ``gcs`` honours ``STORAGE_EMULATOR_HOST`` as Google's SDK does (that endpoint,
anonymous credentials). Secrets (``SECRET_FIELDS``) are kept out of the store (``redact``) in a private
file of the experiment (``save_secrets``), and never appear in a message.

Errors: a permission error or a missing bucket / container is permanent (no retry); anything
else is retried ``DET_LITE_STORAGE_RETRIES`` times (default 3) with doubling waits from 0.5 s.
What still fails is a :class:`StorageError` (an ``ActionRequired``: the experiment pauses).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time
import uuid as uuid_module
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from determined_lite.storage._code import copy_checkpoint
from determined_lite.storage._confine import StorageError, inside, name_problem, stored_names
from determined_lite.storage._layout import is_checkpoint_id, publish_dir
from determined_lite.store._paths import (
    checkpoint_root,
    experiment_dir,
    make_private_dirs,
    open_private,
    restrict_tree,
)

SECRET_FIELDS = ("secret_key", "connection_string", "credential")
REDACTED = "<redacted>"
SECRETS_FILE = "storage-secrets.json"
PROBE_PREFIX = ".det-lite-probe-"
CLOUD_TYPES = ("s3", "gcs", "azure")
_PACKAGES = {"s3": ("s3fs", "s3"), "gcs": ("gcsfs", "gcs"), "azure": ("adlfs", "azure")}
T = TypeVar("T")


def redact(config: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """``config`` with ``checkpoint_storage``'s secrets replaced by ``REDACTED``, and the secrets."""
    out = copy.deepcopy(dict(config))
    storage = out.get("checkpoint_storage") or {}
    secrets = {k: str(storage[k]) for k in SECRET_FIELDS if storage.get(k) not in (None, REDACTED)}
    for key in secrets:
        storage[key] = REDACTED
    return out, secrets


def save_secrets(experiment_id: int, secrets: Mapping[str, str], home: Optional[str] = None) -> None:
    """Keep an experiment's storage secrets in its run directory (under ``home``, default
    ``$DET_LITE_HOME``), readable by the user only."""
    if not secrets:
        return
    directory = make_private_dirs(experiment_dir(experiment_id, home))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with os.fdopen(open_private(os.path.join(directory, SECRETS_FILE), flags), "w") as f:
        json.dump(dict(secrets), f)


def load_secrets(experiment_id: Optional[int]) -> Dict[str, str]:
    if experiment_id is None:
        return {}
    try:
        with open(os.path.join(experiment_dir(experiment_id), SECRETS_FILE)) as f:
            return dict(json.load(f))
    except FileNotFoundError:
        return {}


def _remote_root(storage: Mapping[str, Any]) -> str:
    kind = storage["type"]
    top = storage["container"] if kind == "azure" else storage["bucket"]
    prefix = str(storage.get("prefix") or "").strip("/")
    return f"{top}/{prefix}" if prefix else str(top)


def _filesystem_options(storage: Mapping[str, Any]) -> Dict[str, Any]:
    """fsspec's arguments for a cloud type: only what the config gives (the SDK finds the rest)."""
    kind = storage["type"]
    if kind == "s3":
        options: Dict[str, Any] = {"config_kwargs": {"connect_timeout": 5, "retries": {"max_attempts": 2}}}
        if storage.get("endpoint_url"):
            options["endpoint_url"] = storage["endpoint_url"]
        if storage.get("access_key"):
            options["key"] = storage["access_key"]
        if storage.get("secret_key"):
            options["secret"] = storage["secret_key"]
        return options
    if kind == "azure":
        if storage.get("connection_string"):
            return {"connection_string": storage["connection_string"]}
        host = str(storage["account_url"]).split("://")[-1].strip("/")
        options = {"account_name": host.split(".")[0], "account_host": host}
        if storage.get("credential"):
            options["credential"] = storage["credential"]
        return options
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if kind == "gcs" and emulator not in ("", "default"):
        # Google's SDK: an emulator there, anonymous credentials (Determined's GCS storage too).
        url = emulator if "://" in emulator else f"http://{emulator}"
        return {"endpoint_url": url, "token": "anon"}
    return {}


def _protocol(kind: str) -> str:
    return {"s3": "s3", "gcs": "gcs", "azure": "abfs"}.get(kind, "file")


def _new_filesystem(kind: str, options: Mapping[str, Any]) -> Any:
    import fsspec

    if kind in _PACKAGES:
        package, extra = _PACKAGES[kind]
        try:
            __import__(package)
        except ImportError:
            raise StorageError(
                f"checkpoint_storage.type {kind!r} needs {package}: pip install 'determined-lite[{extra}]'"
            ) from None
    if kind == "gcs" and options.get("endpoint_url"):
        # gcsfs's default class asks a gRPC control plane for each bucket's layout, which an
        # emulator lacks (a minute of retries per bucket); its JSON-API class is what they serve.
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(skip_instance_cache=True, **options)
    return fsspec.filesystem(_protocol(kind), skip_instance_cache=True, **options)


def _permanent(error: BaseException) -> bool:
    """Permission denied or a missing bucket / container: retrying cannot help. s3fs and gcsfs
    raise PermissionError / FileNotFoundError; azure-core's errors carry the HTTP status."""
    if isinstance(error, (PermissionError, FileNotFoundError)):
        return True
    return getattr(error, "status_code", None) in (401, 403, 404)


def upload_names(local_dir: str) -> List[str]:
    """The files under ``local_dir`` (links followed) as ``/``-separated relative names,
    ``metadata.json`` first."""
    files: List[str] = []
    for directory, _, names in os.walk(local_dir, followlinks=True):
        files += [os.path.relpath(os.path.join(directory, n), local_dir).replace(os.sep, "/") for n in names]
    return sorted(files, key=lambda rel: (rel != "metadata.json", rel))


class CheckpointStorage:
    """An experiment's checkpoint storage: ``<root>/<uuid>/`` on one fsspec filesystem, and the
    local directory its checkpoints are written to (and read from)."""

    def __init__(self, kind: str, fs: Any, root: str, local_root: str, secrets: Tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.fs = fs
        self.root = root.rstrip("/")
        self.local_root = local_root
        self._secrets = tuple(s for s in secrets if s)
        self.retries = int(os.environ.get("DET_LITE_STORAGE_RETRIES", "3"))
        self.sleep: Callable[[float], None] = time.sleep

    @property
    def is_local(self) -> bool:
        """Whether checkpoints are written where they are kept (nothing to upload)."""
        return self.kind not in CLOUD_TYPES

    @property
    def url(self) -> str:
        return self.root if self.is_local else f"{_protocol(self.kind)}://{self.root}"

    def local_path(self, checkpoint_uuid: str) -> str:
        return os.path.join(self.local_root, checkpoint_uuid)

    def _key(self, checkpoint_uuid: str) -> str:
        if not is_checkpoint_id(checkpoint_uuid):
            raise ValueError(f"not a checkpoint id: {checkpoint_uuid!r}")
        return f"{self.root}/{checkpoint_uuid}"

    # --- calls with retries ----------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; a transient failure is tried again (bounded), a permanent one is not."""
        delay = 0.5
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as e:  # network, timeouts, the server's 5xx: transient
                if _permanent(e):
                    raise self._error(what, e) from None
                if attempt == self.retries:
                    raise self._error(what, e, attempts=attempt + 1) from None
                self.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _error(self, what: str, error: BaseException, attempts: int = 1) -> StorageError:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = lines[0][:300] if lines else type(error).__name__  # Azure's: then RequestId, XML
        for secret in self._secrets:
            reason = reason.replace(secret, REDACTED)
        tries = f" after {attempts} tries" if attempts > 1 else ""
        return StorageError(f"checkpoint storage {self.url}: {what} failed{tries}: {reason}")

    # --- the operations ----------------------------------------------------------------------

    def probe(self) -> None:
        """Write, read back and delete a small object: the store is reachable and writable. A local root
        that cannot be created or written is an error naming its field (not retried)."""
        key = f"{self.root}/{PROBE_PREFIX}{uuid_module.uuid4().hex}"
        if self.is_local:
            field = "container_path" if self.kind == "directory" else "host_path"
            try:
                make_private_dirs(self.local_root)  # checkpoints are the user's alone
                self.fs.pipe_file(key, b"det-lite")
                self.fs.rm_file(key)
            except OSError as e:
                raise StorageError(
                    f"checkpoint_storage.{field}: cannot write checkpoints in {self.local_root}: "
                    f"{e.strerror or e}"
                ) from None
            return
        token = uuid_module.uuid4().hex.encode()
        self._call("writing a test object", lambda: self.fs.pipe_file(key, token))
        if self._call("reading a test object", lambda: self.fs.cat_file(key)) != token:
            raise StorageError(f"checkpoint storage {self.url}: a test object read back differs")
        self._call("deleting a test object", lambda: self.fs.rm_file(key))

    def upload(self, local_dir: str, checkpoint_uuid: str) -> None:
        """Copy a checkpoint's files (links followed) to ``<root>/<uuid>/``. metadata.json goes
        first: an upload a kill interrupts still names its experiment, for gc to remove it."""
        key = self._key(checkpoint_uuid)
        if self.is_local and os.path.realpath(local_dir) == os.path.realpath(
            self.local_path(checkpoint_uuid)
        ):
            return
        for name in upload_names(local_dir):
            problem = name_problem(name)
            if problem is not None:  # never under another key than the checkpoint's
                raise StorageError(f"checkpoint storage {self.url}: refused to upload {name!r} ({problem})")
            self._call(
                f"uploading checkpoint {checkpoint_uuid}",
                functools.partial(self.fs.put_file, os.path.join(local_dir, name), f"{key}/{name}"),
            )

    def exists(self, checkpoint_uuid: str) -> bool:
        key = self._key(checkpoint_uuid)
        return bool(self._call(f"looking up checkpoint {checkpoint_uuid}", lambda: self.fs.exists(key)))

    def download(self, checkpoint_uuid: str, dest: str) -> str:
        """Copy ``<root>/<uuid>/`` to ``dest`` (next to it first, then renamed): ``dest``. Every
        stored name is checked before anything is written (``_confine``): none lands outside."""
        key = self._key(checkpoint_uuid)
        if self.is_local and os.path.realpath(dest) == os.path.realpath(self.local_path(checkpoint_uuid)):
            return dest
        found = self._call(f"listing checkpoint {checkpoint_uuid}", lambda: self.fs.find(key))
        if not found:
            raise FileNotFoundError(f"checkpoint {checkpoint_uuid} is not in {self.url}")
        names = stored_names(key, found, self.url) if not self.is_local else []
        parent = os.path.dirname(os.path.abspath(dest))
        make_private_dirs(parent)
        staging = os.path.join(parent, f".tmp-{checkpoint_uuid}-{uuid_module.uuid4().hex[:8]}")
        with publish_dir(staging, dest):  # another worker's download may get there first
            if self.is_local:  # a directory: links stay links, code linked to is copied
                copy_checkpoint(key, staging)
            for name, rel in names:
                target = inside(staging, rel)
                make_private_dirs(target if rel.endswith("/") else os.path.dirname(target))
                if not rel.endswith("/"):  # a folder marker is its folder
                    self._call(
                        f"downloading checkpoint {checkpoint_uuid}",
                        functools.partial(self.fs.get_file, name, target),
                    )
            restrict_tree(staging)  # private, as every checkpoint det-lite writes
        return dest

    def local_copy(self, checkpoint_uuid: str, path: Optional[str] = None) -> str:
        """The checkpoint's local directory (``path``, else the local root's), downloaded when gone."""
        path = path or self.local_path(checkpoint_uuid)
        if os.path.isdir(path) or self.is_local:
            return path
        return self.download(checkpoint_uuid, path)

    def delete(self, checkpoint_uuid: str) -> None:
        """Remove the stored checkpoint (its local copy is the caller's)."""
        key = self._key(checkpoint_uuid)
        if self.is_local:
            return
        if self._call(f"looking up checkpoint {checkpoint_uuid}", lambda: self.fs.exists(key)):
            self._call(f"deleting checkpoint {checkpoint_uuid}", lambda: self.fs.rm(key, recursive=True))

    def read_metadata(self, checkpoint_uuid: str) -> Optional[Dict[str, Any]]:
        """The stored checkpoint's metadata.json (None without one)."""
        key = f"{self._key(checkpoint_uuid)}/metadata.json"
        try:
            data = json.loads(self._call("reading metadata", lambda: self.fs.cat_file(key)))
        except (StorageError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def list_ids(self) -> List[str]:
        """The checkpoint ids stored under the root (for gc)."""
        if not self._call("listing checkpoints", lambda: self.fs.exists(self.root)):
            return []
        names = self._call("listing checkpoints", lambda: self.fs.ls(self.root, detail=False))
        ids = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in names]
        return sorted(i for i in ids if is_checkpoint_id(i))


def checkpoint_storage(
    config: Mapping[str, Any], experiment_id: Optional[int] = None, fs: Any = None
) -> CheckpointStorage:
    """The storage that ``config``'s ``checkpoint_storage`` names; redacted secrets are read back
    from the experiment's private file. ``fs``: a filesystem to use instead (tests)."""
    storage = dict(config.get("checkpoint_storage") or {})
    kind = str(storage.get("type") or "shared_fs")
    redacted = [k for k in SECRET_FIELDS if storage.get(k) == REDACTED]
    if redacted:
        storage.update({k: v for k, v in load_secrets(experiment_id).items() if k in redacted})
        for key in redacted:
            if storage.get(key) == REDACTED:
                raise StorageError(
                    f"checkpoint_storage.{key}: its value is no longer in the experiment's files"
                )
    local_root = checkpoint_root(config)
    secrets = tuple(str(storage[k]) for k in SECRET_FIELDS if storage.get(k))
    if kind not in CLOUD_TYPES:
        return CheckpointStorage(kind, fs or _new_filesystem(kind, {}), local_root, local_root)
    filesystem = fs or _new_filesystem(kind, _filesystem_options(storage))
    return CheckpointStorage(kind, filesystem, _remote_root(storage), local_root, secrets)


def fetch_checkpoint(store: Any, checkpoint: Mapping[str, Any]) -> str:
    """The local directory of a registered checkpoint (a store's row), downloaded from its
    experiment's cloud store when the local copy is gone."""
    path = str(checkpoint["path"])
    experiment = store.experiments.get(checkpoint["experiment_id"]) if not os.path.isdir(path) else None
    config = (experiment or {}).get("config") or {}
    if (config.get("checkpoint_storage") or {}).get("type") not in CLOUD_TYPES:
        return path
    return checkpoint_storage(config, checkpoint["experiment_id"]).local_copy(str(checkpoint["uuid"]), path)
