"""Checkpoints on disk: ``<root>/<uuid>/{state_dict.pth, metadata.json, code/}``, written atomically.

A checkpoint is assembled in ``<root>/.tmp-<uuid>/`` (``metadata.json`` first, naming the
process that writes it), flushed to disk, then renamed to ``<root>/<uuid>/``; a directory named
by a bare uuid is therefore always complete. The file names and the torch-free helpers
(flushing, the writer record) live in ``determined_lite.storage``.

Loading a checkpoint runs no code from it: ``state_dict.pth`` is read with
``torch.load(weights_only=True)``, and every checkpoint det-lite writes is checked to load that
way before it gets its final name. A file that needs full unpickling (written by an older
det-lite, by Determined, or altered) is refused with :class:`UntrustedCheckpointError` unless
the caller trusts it: ``trust=True``, or ``$DET_LITE_TRUST_CHECKPOINTS=1``. A full volume
gives one :class:`~determined_lite._errors.DiskFullError` naming the checkpoint root.
"""

from __future__ import annotations

import collections
import concurrent.futures
import io
import json
import os
import pickle
import shutil
import uuid as uuidlib
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from determined_lite._errors import ActionRequired, DiskFullError, is_disk_full
from determined_lite.storage import (
    CODE_DIR,
    MAX_CONTEXT_BYTES,
    METADATA_FILE,
    STATE_FILE,
    TMP_PREFIX,
    WRITER_KEY,
    checkpoint_code,
    make_durable,
    writer_record,
)
from determined_lite.storage._layout import fsync_dir, fsync_tree
from determined_lite.store._paths import det_lite_home, make_private_dirs, restrict_tree

FORMAT_VERSION = 2  # 2: the state loads with weights_only=True (RNG states as plain values)
TRUST_ENV = "DET_LITE_TRUST_CHECKPOINTS"
_TRUE_WORDS = ("1", "true", "yes")
MAX_CODE_BYTES = MAX_CONTEXT_BYTES


# --- write ----------------------------------------------------------------------------------


def copy_code(context_dir: str, dest: str, exclude: Sequence[str] = ()) -> None:
    """Put the trial's code into ``dest``: for an experiment's context snapshot, one link to its
    code, put on disk once for all its checkpoints (``storage.checkpoint_code``: a checkpoint
    costs the same whatever the context holds); else a copy of the context directory
    (``.detignore`` and det-lite's default patterns honoured, links out of it refused, at most
    ``MAX_CODE_BYTES``), or of a single module file (plain Python). ``exclude``: directories
    never copied (the checkpoint root, det-lite's home)."""
    checkpoint_code(context_dir, dest, exclude=exclude, limit=MAX_CODE_BYTES)


def write_checkpoint(
    root: str,
    state: Dict[str, Any],
    metadata: Dict[str, Any],
    context_dir: Optional[str],
    checkpoint_uuid: Optional[str] = None,
    durable: bool = True,
) -> Tuple[str, str]:
    """Write a complete checkpoint under ``root``; returns ``(uuid, path)``.

    The directory appears under its final name only once complete (a killed process leaves at
    most a ``.tmp-*`` directory). ``durable=False`` skips flushing it to disk, so that the
    caller can do that with :func:`make_durable` while training goes on; until then a crash of
    the machine (not of the process) could lose it.
    """
    checkpoint_uuid = checkpoint_uuid or str(uuidlib.uuid4())
    tmp = os.path.join(root, f"{TMP_PREFIX}{checkpoint_uuid}")
    final = os.path.join(root, checkpoint_uuid)
    try:
        make_private_dirs(root)
        os.makedirs(tmp)
        # The metadata first: it names this process, so that a garbage collection knows whether
        # the .tmp- directory is still being written.
        meta = dict(metadata, uuid=checkpoint_uuid, format_version=FORMAT_VERSION)
        meta[WRITER_KEY] = writer_record()
        with open(os.path.join(tmp, METADATA_FILE), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
        state_path = os.path.join(tmp, STATE_FILE)
        # Through a Python file, so that a full disk raises OSError(ENOSPC), not torch's
        # "[enforce fail at inline_container.cc]" without an errno.
        with open(state_path, "wb") as f:
            torch.save(state, f)
        check_loadable(state_path, state)
        if context_dir is not None:
            copy_code(context_dir, os.path.join(tmp, CODE_DIR), exclude=(root, det_lite_home()))
        restrict_tree(tmp)  # private: 0700 directories, 0600 files (copies keep their source's modes)
        if durable:
            fsync_tree(tmp)
        os.rename(tmp, final)
        if durable:
            fsync_dir(root)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(
                root,
                f"the checkpoint at batch {metadata.get('total_batches', '?')} could not be written "
                "(its partial files were removed; earlier checkpoints are intact)",
            ) from e
        raise
    return checkpoint_uuid, final


class BackgroundFlush:
    """Flushes checkpoints written with ``durable=False`` on a background thread, in order.

    ``fsync`` waits on the disk and releases the GIL, so training goes on meanwhile; the loop
    calls :meth:`wait` at its next report, checkpoint or end and only then tells anyone (the
    store, ``on_checkpoint_upload_end``) that the checkpoint exists.
    """

    def __init__(self) -> None:
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pending: Optional[Tuple[str, concurrent.futures.Future]] = None

    def start(self, checkpoint_uuid: str, path: str) -> None:
        if self._pending is not None:
            raise RuntimeError("the previous checkpoint must be waited for before the next one starts")
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="det-lite-fsync")
        self._pending = (checkpoint_uuid, self._executor.submit(make_durable, path))

    def wait(self) -> Optional[str]:
        """The uuid of the checkpoint that is now on disk, or None when none was pending."""
        if self._pending is None:
            return None
        checkpoint_uuid, future = self._pending
        self._pending = None
        future.result()
        return checkpoint_uuid

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


# --- read -----------------------------------------------------------------------------------


def read_metadata(path: str) -> Dict[str, Any]:
    meta_path = os.path.join(path, METADATA_FILE)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint directory {path!r} does not exist")
    if not os.path.isfile(meta_path):
        raise FileNotFoundError(
            f"{path!r} is not a complete determined_lite checkpoint: {METADATA_FILE} is missing"
        )
    with open(meta_path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{meta_path}: not valid JSON ({e})") from None


def checkpoint_batches(path: str) -> int:
    """Batches trained when the checkpoint at ``path`` was written (from its metadata)."""
    return int(read_metadata(path).get("total_batches") or 0)


def trusted(trust: Optional[bool] = None) -> bool:
    """Whether checkpoints may be fully unpickled: ``trust`` when given, else
    ``$DET_LITE_TRUST_CHECKPOINTS`` set to ``1`` (or ``true``/``yes``)."""
    if trust is not None:
        return bool(trust)
    return os.environ.get(TRUST_ENV, "").strip().lower() in _TRUE_WORDS


class UntrustedCheckpointError(ActionRequired, ValueError):
    """A checkpoint's ``state_dict.pth`` that loads only by unpickling arbitrary objects, which can
    run code; loaded only when trusted (``trust=True`` or ``$DET_LITE_TRUST_CHECKPOINTS=1``)."""


class UnloadableStateError(TypeError):
    """The state being checkpointed holds an object that ``torch.load(weights_only=True)`` refuses."""


def read_checkpoint(
    path: str, map_location: Any = "cpu", trust: Optional[bool] = None, **torch_load_kwargs: Any
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(state, metadata)`` of the checkpoint at ``path``, with clear errors if incomplete.

    The state is loaded with ``weights_only=True`` unless :func:`trusted` (``trust``, else
    ``$DET_LITE_TRUST_CHECKPOINTS``) or ``torch_load_kwargs`` says ``weights_only``; a file that
    needs full unpickling raises :class:`UntrustedCheckpointError` without running any of it.
    """
    metadata = read_metadata(path)
    state_path = os.path.join(path, STATE_FILE)
    if not os.path.isfile(state_path):
        raise FileNotFoundError(
            f"{path!r} is not a complete determined_lite checkpoint: {STATE_FILE} is missing"
        )
    return load_state_file(state_path, map_location, trust, **torch_load_kwargs), metadata


def load_state_file(
    state_path: str,
    map_location: Any = "cpu",
    trust: Optional[bool] = None,
    safe_globals: Sequence[Any] = (),
    **torch_load_kwargs: Any,
) -> Any:
    """``torch.load`` of a checkpoint's state file, ``weights_only=True`` unless :func:`trusted`
    (or ``torch_load_kwargs`` says ``weights_only``); ``safe_globals``: data-only types allowed
    on top of torch's (``torch.serialization.safe_globals`` entries). A file that needs more
    raises :class:`UntrustedCheckpointError` without running any of it."""
    kwargs: Dict[str, Any] = {"map_location": map_location, "weights_only": not trusted(trust)}
    kwargs.update(torch_load_kwargs)
    try:
        with torch.serialization.safe_globals(list(safe_globals)):
            return torch.load(state_path, **kwargs)
    except pickle.UnpicklingError as e:
        if not kwargs["weights_only"]:
            raise
        raise UntrustedCheckpointError(
            f"{state_path} needs full unpickling, which can run code from the file "
            f"({_refusal_reason(e)}): it was not written by this determined_lite (e.g. by "
            f"Determined or an older det-lite) or it was altered. Load it only if you trust it: "
            f"set {TRUST_ENV}=1 (in Python: trust=True)"
        ) from None


def _refusal_reason(error: BaseException) -> str:
    """The line of torch's weights-only error that names what it refused."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = lines[0] if lines else type(error).__name__
    return reason.split(" Please use ", 1)[0].rstrip(".")


# --- the written state loads without unpickling objects ---------------------------------------

_PLAIN_LEAVES = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size)
_PLAIN_CONTAINERS = (dict, collections.OrderedDict, list, tuple)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def check_loadable(state_path: str, state: Dict[str, Any]) -> None:
    """Raise :class:`UnloadableStateError` unless ``state_path`` (``state`` saved) loads with
    ``weights_only=True``. A state of plain values and plain tensors only (:func:`plainly_loadable`,
    every state det-lite's own parts write) loads so by construction; any other is loaded once,
    memory-mapped (the tensors' bytes are not read again), by torch's weights-only unpickler."""
    if plainly_loadable(state):
        return
    try:
        torch.load(state_path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        raise UnloadableStateError(_describe_unloadable(state, _refusal_reason(e))) from None


_WALKED_LEAVES = (str, int, float, bool, type(None))
_WALKED_DEVICES = ("cpu", "cuda")
_WALKED_DTYPES = frozenset(
    (torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.complex64, torch.complex128)
    + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
)


def plainly_loadable(state: Any) -> bool:
    """Whether ``state`` holds only what every supported torch's ``weights_only`` unpickler
    loads: these exact container types with plain keys, plain leaves, and exact tensors or
    parameters of a long-standing dtype, with a strided layout on the CPU or a GPU and no Python
    attributes or hooks. False means "not known". The walk costs a small trial's state ~1 ms of
    CPU where loading the file costs ~10 ms."""
    seen: Set[int] = set()
    todo: List[Any] = [state]
    while todo:
        obj = todo.pop()
        kind = type(obj)
        if kind in _WALKED_LEAVES:
            continue
        if kind in _PLAIN_TENSORS:
            if not _plain_tensor(obj):
                return False
            continue
        if kind not in _PLAIN_CONTAINERS:
            return False
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            if any(type(key) not in _WALKED_LEAVES for key in obj):
                return False
            todo.extend(obj.values())
        else:
            todo.extend(obj)
    return True


def _plain_tensor(tensor: torch.Tensor) -> bool:
    return (
        tensor.layout == torch.strided
        and tensor.dtype in _WALKED_DTYPES
        and not tensor.is_quantized
        and tensor.device.type in _WALKED_DEVICES
        and not tensor.__dict__
        and not getattr(tensor, "_backward_hooks", None)
    )


def _describe_unloadable(state: Dict[str, Any], reason: str) -> str:
    found = _first_unloadable(state, [])
    allowed = (
        "checkpoints hold only tensors and plain values (dict, list, tuple, str, int, float, bool, "
        "None), so that loading one cannot run code"
    )
    if found is None:
        return f"the checkpoint state cannot be loaded with weights_only=True ({reason}); {allowed}"
    where, obj = found
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    label = "".join(f"[{k!r}]" for k in where)
    if len(where) >= 2 and where[0] == "callbacks":
        fix = f"return such values from the state_dict() of callback {where[1]!r}"
    else:
        fix = "return such values from its state_dict()"
    return (
        f"the checkpoint state{label} is a {kind}, which torch.load(weights_only=True) refuses "
        f"({reason}); {allowed}: {fix}, or allowlist the type with "
        "torch.serialization.add_safe_globals"
    )


def _first_unloadable(obj: Any, where: List[Any]) -> Optional[Tuple[List[Any], Any]]:
    """The first object (and its key path) in ``obj`` that does not load with weights_only."""
    kind = type(obj)
    if kind in _PLAIN_CONTAINERS:
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, value in items:
            if isinstance(obj, dict) and type(key) not in _PLAIN_LEAVES and not _loads_alone(key):
                return where, key
            found = _first_unloadable(value, where + [key])
            if found is not None:
                return found
        return None
    if kind in _PLAIN_LEAVES or kind in _PLAIN_TENSORS or _loads_alone(obj):
        return None
    return where, obj


def _loads_alone(obj: Any) -> bool:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, weights_only=True)
    except pickle.UnpicklingError:
        return False
    return True
