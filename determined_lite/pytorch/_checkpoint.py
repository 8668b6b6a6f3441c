"""Checkpoints on disk: ``<root>/<uuid>/{state_dict.pth, metadata.json, code/}``, written atomically.

A checkpoint is assembled in ``<root>/.tmp-<uuid>/``, flushed to disk, then renamed to
``<root>/<uuid>/``; a directory named by a bare uuid is therefore always complete.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import random
import shutil
import sys
import uuid as uuidlib
from typing import Any, Dict, Optional, Tuple, Type

import numpy as np
import torch

from determined_lite.store._paths import make_private_dirs, restrict_tree

STATE_FILE = "state_dict.pth"
METADATA_FILE = "metadata.json"
CODE_DIR = "code"
FORMAT_VERSION = 1
MAX_CODE_BYTES = 95 * 1024 * 1024
_CODE_IGNORE = shutil.ignore_patterns(
    ".*", "__pycache__", "*.pyc", "*.egg-info", "venv", "node_modules", "*.pth", "*.ckpt"
)


# --- RNG ------------------------------------------------------------------------------------


def capture_rng_state() -> Dict[str, Any]:
    """Python, numpy, torch and (if present) CUDA generator states."""
    state: Dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        saved = state["cuda"]
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) from one trial seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# --- write ----------------------------------------------------------------------------------


def _fsync_tree(path: str) -> None:
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())


def _dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def copy_code(context_dir: str, dest: str) -> None:
    """Copy the trial's context directory (no hidden files, caches or weight files).

    A file instead of a directory (the trial's module, for trials run from plain Python) is
    copied alone into ``dest``.
    """
    if os.path.isfile(context_dir):
        os.makedirs(dest)
        shutil.copy2(context_dir, dest)
        return
    shutil.copytree(context_dir, dest, ignore=_CODE_IGNORE)
    size = _dir_size(dest)
    if size > MAX_CODE_BYTES:
        raise ValueError(
            f"the context directory {context_dir!r} holds {size / 2**20:.1f} MiB of files to copy "
            f"into every checkpoint; the limit is {MAX_CODE_BYTES / 2**20:.0f} MiB — move data "
            "out of it"
        )


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
    make_private_dirs(root)
    tmp = os.path.join(root, f".tmp-{checkpoint_uuid}")
    final = os.path.join(root, checkpoint_uuid)
    try:
        os.makedirs(tmp)
        torch.save(state, os.path.join(tmp, STATE_FILE))
        meta = dict(metadata, uuid=checkpoint_uuid, format_version=FORMAT_VERSION)
        with open(os.path.join(tmp, METADATA_FILE), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
        if context_dir is not None:
            copy_code(context_dir, os.path.join(tmp, CODE_DIR))
        restrict_tree(tmp)  # private: 0700 directories, 0600 files (copies keep their source's modes)
        if durable:
            _fsync_tree(tmp)
        os.rename(tmp, final)
        if durable:
            _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return checkpoint_uuid, final


def make_durable(path: str) -> None:
    """Flush a checkpoint written with ``durable=False`` (its files and its name) to disk."""
    _fsync_tree(path)
    _fsync_dir(os.path.dirname(os.path.normpath(path)))


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


def _fsync_dir(path: str) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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


def read_checkpoint(
    path: str, map_location: Any = "cpu", **torch_load_kwargs: Any
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(state, metadata)`` of the checkpoint at ``path``, with clear errors if incomplete."""
    metadata = read_metadata(path)
    state_path = os.path.join(path, STATE_FILE)
    if not os.path.isfile(state_path):
        raise FileNotFoundError(
            f"{path!r} is not a complete determined_lite checkpoint: {STATE_FILE} is missing"
        )
    kwargs = {"map_location": map_location, "weights_only": False}
    kwargs.update(torch_load_kwargs)
    state = torch.load(state_path, **kwargs)
    return state, metadata


def _import_trial_class(spec: str, code_dir: str) -> Type[Any]:
    module_name, _, class_name = spec.partition(":")
    if os.path.isdir(code_dir) and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"cannot import trial module {module_name!r} recorded in the checkpoint "
            f"(looked in {code_dir!r} and sys.path): {e}; pass trial_class= explicitly"
        ) from e
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise ImportError(
            f"module {module_name!r} has no trial class {class_name!r} (from the checkpoint)"
        ) from None


def load_trial_from_checkpoint_path(
    path: str,
    trial_class: Optional[Type[Any]] = None,
    trial_kwargs: Optional[Dict[str, Any]] = None,
    torch_load_kwargs: Optional[Dict[str, Any]] = None,
) -> Any:
    """Rebuild the trial saved at ``path`` with its weights loaded (e.g. for inference).

    The trial class comes from the checkpoint's metadata and ``code/`` unless ``trial_class``
    is given; hyperparameters and experiment config are those the trial was trained with.
    """
    from determined_lite.pytorch._context import PyTorchTrialContext

    state, metadata = read_checkpoint(path, **(torch_load_kwargs or {}))
    if trial_class is None:
        from determined_lite.compat import install_alias

        install_alias()  # a trial written for Determined imports `determined`: the alias, unless installed
        trial_class = _import_trial_class(metadata["trial_class"], os.path.join(path, CODE_DIR))
    context = PyTorchTrialContext(
        hparams=metadata.get("hparams") or {},
        exp_conf=metadata.get("experiment_config") or {},
        trial_seed=metadata.get("trial_seed", 0),
        trial_id=metadata.get("trial_id"),
        experiment_id=metadata.get("experiment_id"),
        aggregation_frequency=metadata.get("aggregation_frequency", 1),
    )
    trial = trial_class(context, **(trial_kwargs or {}))
    context.harness.load_state_dict(state["context"], strict=False)
    return trial
