"""The run's data on Ray: what travels between the driver and a slot's node besides reports.

A Ray node shares nothing with the driver but the image and the checkpoint storage. So:

- the context snapshot (and a warm start's checkpoint, which the driver fetched) travels as one
  tar archive in Ray's object store (:func:`pack_context`, once per experiment) and is unpacked
  once per node and archive into a node-local cache
  (:func:`unpack_context`: ``$DET_LITE_RAY_CACHE``, else ``<tmp>/det-lite-ray-<uid>``);
- the worker runs from a node-local copy of its spec (:func:`node_spec`): its run directory
  (result, progress, failure records), TensorBoard directory and ``$DET_LITE_HOME`` are the
  slot's own directory; with a cloud ``checkpoint_storage`` its checkpoints are written there
  too, uploaded by the chief itself, and the checkpoint it resumes from is downloaded there;
- what the workers write into their run and TensorBoard directories comes back with the slot's
  output (:class:`FileMirror` on the node, :func:`apply_files` on the driver), into the
  driver's run directory and ``<home>/tensorboard``.

Nothing here imports Ray: the node's half runs in the slot's actor.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

from determined_lite.store._paths import make_private_dirs

CACHE_ENV = "DET_LITE_RAY_CACHE"
RESULT_NAME = "result.json"
# Run files that stay on the node: the watchdog's heartbeats (each rank's own), the chief's
# next-op question (asked over the report pipe on Ray), temporary files of atomic writes.
_LOCAL_ONLY = (".heartbeat.", ".ask.", ".answer.")


def pack_context(context_dir: str) -> Tuple[str, bytes]:
    """The context snapshot as a gzipped tar archive, and a key naming its content."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in sorted(os.listdir(context_dir)):
            tar.add(os.path.join(context_dir, name), arcname=name)
    data = buffer.getvalue()
    return hashlib.sha256(data).hexdigest()[:24], data


def cache_root() -> str:
    """This node's cache of unpacked contexts."""
    return os.environ.get(CACHE_ENV) or os.path.join(tempfile.gettempdir(), f"det-lite-ray-{os.getuid()}")


def unpack_context(key: str, data: bytes) -> str:
    """The directory of the archive ``key`` on this node, unpacked on first use (renamed into
    place whole: concurrent slots of one node unpack it once or wait for nothing)."""
    from determined_lite.storage import publish_dir

    if not key.isalnum():
        raise ValueError(f"not a context key: {key!r}")
    root = make_private_dirs(os.path.join(cache_root(), "contexts"))
    target = os.path.join(root, key)
    if os.path.isdir(target):
        return target
    with publish_dir(tempfile.mkdtemp(dir=root, prefix=".tmp-"), target) as staging:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")  # nothing outside it, no devices, no setuid
    return target


def is_cloud(exp_conf: Mapping[str, Any]) -> bool:
    from determined_lite.storage import CLOUD_TYPES

    return (exp_conf.get("checkpoint_storage") or {}).get("type") in CLOUD_TYPES


def node_spec(fields: Dict[str, Any], slot_dir: str, context_dir: str) -> Dict[str, Any]:
    """The spec's fields as the worker on this node sees them: its context, run and TensorBoard
    directories here; with a cloud storage, its checkpoints here too (uploaded by the chief)."""
    spec = dict(fields)
    spec["context_dir"] = context_dir
    spec["result_path"] = os.path.join(make_private_dirs(os.path.join(slot_dir, "run")), RESULT_NAME)
    spec["tensorboard_path"] = make_private_dirs(os.path.join(slot_dir, "tensorboard"))
    spec["wake_path"] = None  # the runner's FIFO is on the driver: questions go on the pipe
    if is_cloud(spec["exp_conf"]):
        spec["checkpoint_root"] = make_private_dirs(os.path.join(node_home(slot_dir), "checkpoints"))
    return spec


def node_home(slot_dir: str) -> str:
    """The worker's ``$DET_LITE_HOME`` on this node (nothing of the driver's home is here)."""
    return make_private_dirs(os.path.join(slot_dir, "home"))


def restore_here(spec: Dict[str, Any], secrets: Mapping[str, str], home: str) -> None:
    """With a cloud storage: the storage's secrets where the worker's storage reads them (under
    its ``home``), and
    the checkpoint the run resumes from downloaded on this node (``spec`` updated)."""
    if not is_cloud(spec["exp_conf"]):
        return
    from determined_lite.storage import checkpoint_storage, save_secrets

    save_secrets(int(spec["experiment_id"] or 0), secrets, home)  # where the worker reads them
    latest = spec.get("latest_checkpoint")
    if latest:
        config = dict(spec["exp_conf"])
        config["checkpoint_storage"] = {**config["checkpoint_storage"], **secrets}
        storage = checkpoint_storage(config)
        uuid = os.path.basename(os.path.normpath(latest))
        spec["latest_checkpoint"] = storage.local_copy(uuid, os.path.join(spec["checkpoint_root"], uuid))


class FileMirror:
    """What the workers of one slot wrote into their run and TensorBoard directories since the
    last :meth:`changes`: whole run files that changed, appended TensorBoard bytes."""

    def __init__(self, run_dir: str, tensorboard_dir: str) -> None:
        self.run_dir, self.tensorboard_dir = run_dir, tensorboard_dir
        self._seen: Dict[str, Tuple[int, int, int]] = {}
        self._sent: Dict[str, int] = {}  # TensorBoard file -> bytes sent

    def changes(self) -> Dict[str, Any]:
        return {"run": self._run_files(), "tensorboard": self._tensorboard_tails()}

    def _run_files(self) -> Dict[str, str]:
        out: Dict[str, str] = {}
        try:
            names = sorted(os.listdir(self.run_dir))
        except FileNotFoundError:
            return out
        for name in names:
            if not name.startswith(RESULT_NAME) or any(part in name for part in _LOCAL_ONLY):
                continue
            path = os.path.join(self.run_dir, name)
            try:
                st = os.stat(path)
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._seen.get(name) == key:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    out[name] = f.read()
                self._seen[name] = key
            except (FileNotFoundError, IsADirectoryError):
                continue
        return out

    def _tensorboard_tails(self) -> List[Tuple[str, int, str]]:
        out: List[Tuple[str, int, str]] = []
        for directory, _, names in os.walk(self.tensorboard_dir):
            for name in sorted(names):
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, self.tensorboard_dir)
                sent = self._sent.get(rel, 0)
                try:
                    with open(path, "rb") as f:
                        f.seek(sent)
                        data = f.read()
                except FileNotFoundError:
                    continue
                if data:
                    out.append((rel, sent, base64.b64encode(data).decode("ascii")))
                    self._sent[rel] = sent + len(data)
        return out


def apply_files(
    changes: Optional[Mapping[str, Any]], result_path: str, tensorboard_dir: Optional[str]
) -> None:
    """On the driver: a slot's :meth:`FileMirror.changes` written into the run directory of
    ``result_path`` and into ``tensorboard_dir``. A name that would leave them is dropped."""
    if not changes:
        return
    run_dir = os.path.dirname(result_path)
    for name, text in (changes.get("run") or {}).items():
        if os.path.basename(name) != name or not name.startswith(RESULT_NAME):
            continue
        fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".tmp-")  # 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(run_dir, name))
    for rel, offset, data in changes.get("tensorboard") or ():
        path = os.path.normpath(os.path.join(tensorboard_dir or "", rel))
        if not tensorboard_dir or not path.startswith(os.path.join(tensorboard_dir, "")):
            continue  # an absolute name or one with "..": not the trial's
        make_private_dirs(os.path.dirname(path))
        with open(path, "r+b" if os.path.exists(path) else "wb") as f:
            f.seek(int(offset))
            f.write(base64.b64decode(data))
