"""Checkpoints written by Determined itself (0.13 to 0.38), read as Determined's harness reads them.

Determined's ``PyTorchTrial`` checkpoint directory holds ``state_dict.pth``: a dict with
``models_state_dict``, ``optimizers_state_dict``, ``lr_schedulers_state_dict`` (lists, in
wrapping order), ``callbacks`` (name → state), ``rng_state`` (``cpu_rng_state``,
``np_rng_state``, ``random_rng_state``, ``gpu_rng_state``), ``scaler_state_dict`` (a
``GradScaler``) and ``amp_state`` (apex); the oldest trials wrote one ``model_state_dict``,
``optimizer_state_dict`` and ``lr_scheduler`` instead. Beside it: ``code/`` (the trial's
code), ``load_data.json`` (0.17.8 on: ``trial_cls_spec``, ``experiment_config``, ``hparams``)
or a ``metadata.json`` with ``experiment_config`` and ``hparams`` (the trial class is then the
config's ``entrypoint``; Determined's ``Checkpoint.download()`` writes it for older ones), and
the progress in ``trial_state.pkl`` (``batches_trained``), ``workload_sequencer.pkl``
(``steps_completed``, before 0.19) or ``metadata.json``'s ``steps_completed``.

Safety is det-lite's (docs/design.md, "Loading checkpoints"): ``state_dict.pth`` loads with
``weights_only=True`` plus numpy's array types (Determined pickles numpy's RNG state), so an
untrusted file runs no code; the ``.pkl`` progress files are read by an unpickler that accepts
no class or function at all; ``code/`` is imported from only when the checkpoint is trusted.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import pickle
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from determined_lite.pytorch import _rng
from determined_lite.pytorch._checkpoint import load_state_file
from determined_lite.storage import METADATA_FILE, STATE_FILE

logger = logging.getLogger("determined_lite")

LOAD_DATA_FILE = "load_data.json"
TRIAL_STATE_FILE = "trial_state.pkl"
LEGACY_SEQUENCER_FILE = "workload_sequencer.pkl"
_DET_LITE_KEYS = ("determined_lite_version", "format_version")  # in det-lite's own metadata.json
_DDP_PREFIX = "module."


def _numpy_globals() -> List[Any]:
    """numpy's array types (data only), under numpy 2's names and numpy 1's, for torch's
    weights-only unpickler."""
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's multiarray._reconstruct
    return [
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        (reconstruct, "numpy._core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        *(type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDG"),
    ]


class DeterminedCheckpointError(ValueError):
    """A directory that looks like a Determined checkpoint but cannot be used as one."""


@dataclasses.dataclass
class DeterminedCheckpoint:
    """What det-lite uses of a Determined checkpoint directory."""

    path: str
    uuid: str
    state: Dict[str, Any]  # state_dict.pth
    trial_cls_spec: Optional[str]  # module:Class
    experiment_config: Dict[str, Any]
    hparams: Dict[str, Any]
    batches_trained: int
    # No load_data.json: written before 0.17.8, so possibly by a pre-0.12.13 trial with
    # build_model() (Determined looks for that method only then).
    legacy: bool = False


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise DeterminedCheckpointError(f"{path}: not valid JSON ({e})") from None
    return data if isinstance(data, dict) else None


def is_determined_checkpoint(path: str) -> bool:
    """Whether ``path`` is a checkpoint directory written by Determined (not by det-lite)."""
    if not os.path.isfile(os.path.join(path, STATE_FILE)):
        return False
    determined_only = (LOAD_DATA_FILE, TRIAL_STATE_FILE, LEGACY_SEQUENCER_FILE)
    if any(os.path.isfile(os.path.join(path, name)) for name in determined_only):
        return True
    meta = _read_json(os.path.join(path, METADATA_FILE))
    return meta is not None and not any(k in meta for k in _DET_LITE_KEYS)


class _PlainUnpickler(pickle.Unpickler):
    """Accepts plain values only (dicts, lists, numbers, strings): any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value")


def _progress_file(path: str) -> Optional[Dict[str, Any]]:
    for name in (TRIAL_STATE_FILE, LEGACY_SEQUENCER_FILE):
        file = os.path.join(path, name)
        if os.path.isfile(file):
            with open(file, "rb") as f:
                try:
                    data = _PlainUnpickler(io.BytesIO(f.read())).load()
                except (pickle.UnpicklingError, EOFError, ValueError) as e:
                    logger.warning("%s: not read (%s); using metadata.json's steps_completed", file, e)
                    return None
            return data if isinstance(data, dict) else None
    return None


def batches_trained(path: str) -> int:
    """Batches the trial had trained when Determined wrote the checkpoint at ``path``."""
    progress = _progress_file(path) or {}
    for key in ("batches_trained", "steps_completed"):
        if isinstance(progress.get(key), int):
            return int(progress[key])
    meta = _read_json(os.path.join(path, METADATA_FILE)) or {}
    value = meta.get("steps_completed", meta.get("latest_batch"))
    return int(value) if isinstance(value, int) else 0


def read_determined_checkpoint(
    path: str, trust: Optional[bool] = None, **torch_load_kwargs: Any
) -> DeterminedCheckpoint:
    """Read the Determined checkpoint at ``path`` (without running code from it unless trusted)."""
    load_data = _read_json(os.path.join(path, LOAD_DATA_FILE))
    meta = _read_json(os.path.join(path, METADATA_FILE)) or {}
    if load_data is not None:
        if load_data.get("trial_type", "PyTorchTrial") != "PyTorchTrial":
            logger.warning("%s: trial_type is %r, not PyTorchTrial", path, load_data.get("trial_type"))
        exp_conf = load_data.get("experiment_config") or {}
        hparams = load_data.get("hparams") or {}
        spec = load_data.get("trial_cls_spec")
    else:
        exp_conf = meta.get("experiment_config") or {}
        hparams = meta.get("hparams") or exp_conf.get("hyperparameters") or {}
        spec = exp_conf.get("entrypoint") if isinstance(exp_conf, dict) else None
    kwargs = dict(torch_load_kwargs)
    map_location = kwargs.pop("map_location", "cpu")
    state = load_state_file(
        os.path.join(path, STATE_FILE), map_location, trust, safe_globals=_numpy_globals(), **kwargs
    )
    if not isinstance(state, dict):
        raise DeterminedCheckpointError(f"{path}/{STATE_FILE} holds a {type(state).__name__}, not a dict")
    return DeterminedCheckpoint(
        path=path,
        uuid=str(meta.get("uuid") or os.path.basename(os.path.normpath(path))),
        state=state,
        trial_cls_spec=spec if isinstance(spec, str) and ":" in spec else None,
        experiment_config=exp_conf if isinstance(exp_conf, dict) else {},
        hparams=hparams if isinstance(hparams, dict) else {},
        batches_trained=batches_trained(path),
        legacy=load_data is None,
    )


def _one_or_list(state: Dict[str, Any], many: str, one: str, have: int, what: str) -> List[Any]:
    """``state[many]``, or the older single ``state[one]`` (as Determined: only for one object)."""
    if one in state:
        if many in state:
            raise DeterminedCheckpointError(f"the checkpoint has both {one!r} and {many!r}")
        if have > 1:
            raise DeterminedCheckpointError(
                f"the checkpoint has one {what} ({one!r}) but the trial wrapped {have}"
            )
        return [state[one]]
    return list(state.get(many, []))


def _strip_ddp_prefix(state_dict: Dict[str, Any]) -> Dict[str, Any]:
    """A model saved inside DistributedDataParallel (``module.`` keys), as a plain module's."""
    if state_dict and all(str(k).startswith(_DDP_PREFIX) for k in state_dict):
        return type(state_dict)((k[len(_DDP_PREFIX) :], v) for k, v in state_dict.items())
    return state_dict


def context_state(
    ckpt: DeterminedCheckpoint,
    *,
    models: int,
    optimizers: int,
    lr_schedulers: int,
    scalers: int,
    amp_scaler: bool,
    optimizer_steps: int,
) -> Dict[str, Any]:
    """Determined's state as det-lite's ``TrialHarness.state_dict()`` of a trial that wrapped
    that many objects (``optimizer_steps``: the step count each optimizer resumes at)."""
    state = ckpt.state
    scaler = state.get("scaler_state_dict")
    if scaler is not None and not (scalers or amp_scaler):
        logger.warning("the checkpoint has a scaler_state_dict but the trial uses no AMP scaler; not loaded")
    if scaler is None and (scalers or amp_scaler):
        logger.warning("the trial uses an AMP scaler but the checkpoint has no scaler_state_dict")
    if "amp_state" in state:
        logger.warning("the checkpoint's amp_state (NVIDIA apex) is not loaded: det-lite has no apex")
    n_opt = len(_one_or_list(state, "optimizers_state_dict", "optimizer_state_dict", optimizers, "optimizer"))
    return {
        "models_state_dict": [
            _strip_ddp_prefix(sd)
            for sd in _one_or_list(state, "models_state_dict", "model_state_dict", models, "model")
        ],
        "optimizers_state_dict": _one_or_list(
            state, "optimizers_state_dict", "optimizer_state_dict", optimizers, "optimizer"
        ),
        "optimizer_steps": [optimizer_steps] * n_opt,
        "lr_schedulers_state_dict": _one_or_list(
            state, "lr_schedulers_state_dict", "lr_scheduler", lr_schedulers, "LR scheduler"
        ),
        "scalers_state_dict": [scaler] * scalers if scaler is not None else [None] * scalers,
        "amp_scaler_state_dict": scaler if amp_scaler else None,
    }


def legacy_model_weights(ckpt: DeterminedCheckpoint) -> Dict[str, Any]:
    """The one model's weights of a pre-0.12.13 checkpoint (``model_state_dict``, else the first
    of ``models_state_dict``)."""
    state = ckpt.state
    weights = state["model_state_dict"] if "model_state_dict" in state else state["models_state_dict"][0]
    return _strip_ddp_prefix(weights)


def rng_state(ckpt: DeterminedCheckpoint) -> Optional[Dict[str, Any]]:
    """The chief's random states in det-lite's form (Determined restores them on every worker)."""
    saved = ckpt.state.get("rng_state")
    if not isinstance(saved, dict) or not {"cpu_rng_state", "np_rng_state", "random_rng_state"} <= set(saved):
        logger.warning("the checkpoint has no random state to restore")
        return None
    out = {
        _rng.PYTHON: saved["random_rng_state"],
        _rng.NUMPY: saved["np_rng_state"],
        _rng.TORCH: saved["cpu_rng_state"],
    }
    if "gpu_rng_state" in saved and torch.cuda.is_available():
        out[_rng.CUDA] = [saved["gpu_rng_state"]] * torch.cuda.device_count()
    return out


__all__ = [
    "DeterminedCheckpoint",
    "DeterminedCheckpointError",
    "batches_trained",
    "context_state",
    "is_determined_checkpoint",
    "legacy_model_weights",
    "read_determined_checkpoint",
    "rng_state",
]
