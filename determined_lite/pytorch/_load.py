"""``load_trial_from_checkpoint_path``: rebuild a trained trial from a checkpoint directory.

Which code runs (docs/design.md, "Loading checkpoints"): the trial class is ``trial_class``
when given; otherwise the ``module:Class`` recorded in the checkpoint's metadata, imported from
the caller's ``sys.path`` (code the caller already runs). The checkpoint's own ``code/``
directory is imported from only when the caller trusts the checkpoint (``trust=True`` or
``$DET_LITE_TRUST_CHECKPOINTS=1``), as Determined does. The weights load with
``weights_only=True`` unless trusted (see ``_checkpoint.read_checkpoint``). Checkpoints written
by Determined itself are read by ``_determined_ckpt`` under the same rules.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Optional, Type

from determined_lite.compat import import_from_path
from determined_lite.pytorch import _determined_ckpt
from determined_lite.pytorch._checkpoint import CODE_DIR, TRUST_ENV, read_checkpoint, trusted


def _import_trial_class(spec: str, code_dir: Optional[str]) -> Type[Any]:
    """Import ``module:Class``: from ``code_dir`` when given (``import_from_path``: the
    checkpoint's own code, ``sys.path`` and ``sys.modules`` left as they were), else from
    ``sys.path`` only."""
    module_name, _, class_name = spec.partition(":")
    try:
        if code_dir is not None and os.path.isdir(code_dir):
            with import_from_path(code_dir):
                module = importlib.import_module(module_name)
        else:
            module = importlib.import_module(module_name)
    except ImportError as e:
        if code_dir is None:
            raise ImportError(
                f"cannot import trial module {module_name!r} recorded in the checkpoint from "
                f"sys.path ({e}); pass trial_class= explicitly, or, if you trust the checkpoint, "
                f"trust=True (or {TRUST_ENV}=1) to import it from the checkpoint's {CODE_DIR}/ "
                "directory"
            ) from e
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
    *,
    trust: Optional[bool] = None,
) -> Any:
    """Rebuild the trial saved at ``path`` with its weights loaded (e.g. for inference).

    Hyperparameters and experiment config are those the trial was trained with. The trial class
    is ``trial_class``, else the recorded ``module:Class`` imported from ``sys.path``; only a
    trusted checkpoint (``trust=True``, or ``trust=None`` and ``$DET_LITE_TRUST_CHECKPOINTS=1``)
    may also import it from its ``code/`` directory and be fully unpickled. ``torch_load_kwargs``
    go to ``torch.load`` (``weights_only=False`` there allows unpickling, not importing code).
    """
    from determined_lite.pytorch._context import PyTorchTrialContext

    trust = trusted(trust)
    if _determined_ckpt.is_determined_checkpoint(path):
        return _load_determined(path, trial_class, trial_kwargs, torch_load_kwargs, trust)
    state, metadata = read_checkpoint(path, trust=trust, **(torch_load_kwargs or {}))
    if trial_class is None:
        trial_class = _recorded_class(metadata["trial_class"], path, trust)
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


def _recorded_class(spec: str, path: str, trust: bool) -> Type[Any]:
    from determined_lite.compat import install_alias

    install_alias()  # a trial written for Determined imports `determined`: the alias, unless installed
    code_dir = os.path.abspath(os.path.join(path, CODE_DIR)) if trust else None
    return _import_trial_class(spec, code_dir)


def _load_determined(
    path: str,
    trial_class: Optional[Type[Any]],
    trial_kwargs: Optional[Dict[str, Any]],
    torch_load_kwargs: Optional[Dict[str, Any]],
    trust: bool,
) -> Any:
    """A trial from a checkpoint written by Determined: its class (``load_data.json``'s
    ``trial_cls_spec``, else the config's ``entrypoint``), hparams and config; its weights. A
    checkpoint without load_data.json whose trial has ``build_model()`` (the pre-0.12.13 API)
    gives that model with the weights loaded, as Determined returns it."""
    from determined_lite.pytorch._context import PyTorchTrialContext

    ckpt = _determined_ckpt.read_determined_checkpoint(path, trust=trust, **(torch_load_kwargs or {}))
    if trial_class is None:
        if ckpt.trial_cls_spec is None:
            raise ImportError(
                f"the Determined checkpoint {path!r} names no trial class (no load_data.json, and "
                "no entrypoint in its metadata.json's experiment_config); pass trial_class="
            )
        trial_class = _recorded_class(ckpt.trial_cls_spec, path, trust)
    exp_conf = ckpt.experiment_config
    optimizations = exp_conf.get("optimizations") or {}
    context = PyTorchTrialContext(
        hparams=ckpt.hparams,
        exp_conf=exp_conf,
        aggregation_frequency=int(optimizations.get("aggregation_frequency", 1) or 1),
    )
    trial = trial_class(context, **(trial_kwargs or {}))
    build_model = getattr(trial, "build_model", None)
    if ckpt.legacy and callable(build_model):
        # Determined: a trial of the pre-0.12.13 API (build_model()) loads as the bare model.
        model = build_model()
        model.load_state_dict(_determined_ckpt.legacy_model_weights(ckpt))
        return model
    harness = context.harness
    counts = harness.wrapped_counts()
    state = _determined_ckpt.context_state(ckpt, **counts, amp_scaler=False, optimizer_steps=0)
    harness.load_state_dict(state, strict=False)
    return trial
