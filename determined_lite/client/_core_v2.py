"""Determined's ``determined.experimental.core_v2``: the Core API as singletons, managed or not.

Inside a trial det-lite runs (``det.get_cluster_info()`` is set) ``init()`` builds the same
context ``det.core.init()`` does (``Config`` is ignored, as Determined ignores it there);
``core_v2.train``, ``.checkpoint``, ``.distributed``, ``.preempt``, ``.searcher`` and ``.info``
are its parts. In a plain ``python3 script.py`` it records an unmanaged experiment of one trial
in det-lite's store (``experiment._unmanaged``) from ``Config`` and reports there. ``close()``
(also run at exit) ends it: COMPLETED, or ERROR when an exception ended the script;
``init_context()`` is the same as a context manager (an exception inside it: ERROR).

The singletons live in this module; the alias module ``determined.experimental.core_v2`` reads
them from here (its ``__getattr__``), so ``core_v2.train`` is always the current one.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import urllib.parse
import uuid
from typing import Any, Dict, List, Optional, Union

from determined_lite.client._errors import warn_deprecated
from determined_lite.core import Context, PreemptMode, TensorboardMode
from determined_lite.core import init as core_init
from determined_lite.core._context import trial_context
from determined_lite.runtime._cluster import get_cluster_info

SINGLETONS = ("train", "distributed", "preempt", "checkpoint", "searcher", "info")

train: Any = None
distributed: Any = None
preempt: Any = None
checkpoint: Any = None
searcher: Any = None
info: Any = None

_context: Optional[Context] = None
_atexit_registered = False


@dataclasses.dataclass
class Config:
    """What an unmanaged run records (ignored inside a det-lite trial, as in Determined):
    ``name``, ``hparams`` (the trial's), ``data``, ``description``, ``labels``,
    ``checkpoint_storage`` (a directory, ``s3://``/``gs://`` or a dict), ``searcher`` (its
    metric sorts checkpoints); ``workspace`` and ``project`` are accepted (det-lite has none);
    ``external_experiment_id`` / ``external_trial_id``: group runs in one experiment / resume a
    trial."""

    name: Optional[str] = None
    hparams: Optional[Dict[str, Any]] = None
    data: Optional[Dict] = None
    description: Optional[str] = None
    labels: Optional[List[str]] = None
    workspace: Optional[str] = None
    project: Optional[str] = None
    checkpoint_storage: Optional[Union[str, Dict[str, Any]]] = None
    searcher: Optional[Dict[str, Any]] = None
    external_experiment_id: Optional[str] = None
    external_trial_id: Optional[str] = None


@dataclasses.dataclass
class DefaultConfig(Config):
    """Deprecated in Determined: use ``Config``."""

    def __init__(self, **kwargs: Any) -> None:
        warn_deprecated(
            "'DefaultConfig' class have been deprecated and will be removed in a future version. "
            "Please use `Config` class instead.",
        )
        super().__init__(**kwargs)


@dataclasses.dataclass
class UnmanagedConfig(Config):
    """Deprecated in Determined: use ``Config``."""

    def __init__(self, **kwargs: Any) -> None:
        warn_deprecated(
            "'UnmanagedConfig' class have been deprecated and will be removed in a future version. "
            "Please use `Config` class instead.",
        )
        super().__init__(**kwargs)


def storage_config(shortcut: str) -> Dict[str, Any]:
    """Determined's ``checkpoint_storage`` string off-cluster: a path is a ``directory``
    (relative paths from the working directory), ``s3://bucket/prefix`` and ``gs://...`` a
    bucket."""
    parsed = urllib.parse.urlparse(shortcut)
    if any((parsed.params, parsed.query, parsed.fragment)):
        raise ValueError(f'Malformed checkpoint_storage string "{shortcut}"')
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        return {"type": "directory", "container_path": os.path.abspath(parsed.path)}
    if scheme in ("s3", "gs"):
        kind = {"s3": "s3", "gs": "gcs"}[scheme]
        return {"type": kind, "bucket": parsed.netloc, "prefix": parsed.path.lstrip("/")}
    raise NotImplementedError("checkpoint_storage shortcuts are file paths, s3:// and gs:// (as Determined)")


def _recorded_config(config: Config, checkpoint_storage: Any) -> Dict[str, Any]:
    """The experiment config of an unmanaged run (Determined's ``_init_context``)."""
    storage = checkpoint_storage or config.checkpoint_storage
    return {
        "name": config.name or f"unmanaged-{uuid.uuid4().hex[:8]}",
        "data": config.data,
        "description": config.description,
        "searcher": config.searcher or {"name": "single", "metric": "unmanaged"},
        "checkpoint_storage": storage_config(storage) if isinstance(storage, str) else storage,
    }


def _init_context(
    config: Config, distributed: Any, checkpoint_storage: Any, preempt_mode: Any, tensorboard_mode: Any
) -> Context:
    cluster = get_cluster_info()
    if cluster is not None:  # a det-lite trial: Determined's managed mode
        return core_init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            tensorboard_mode=tensorboard_mode,
        )
    from determined_lite.distributed import SingleProcessContext
    from determined_lite.experiment._unmanaged import UnmanagedRun

    dist = distributed or SingleProcessContext()
    external = (config.external_experiment_id, config.external_trial_id)
    recorded = _recorded_config(config, checkpoint_storage)
    run = UnmanagedRun.record(recorded, config.hparams, config.labels, external, dist)
    return trial_context(run.trial, dist, None, preempt_mode, run.info, ending=run)


def _merge_config(
    config: Optional[Config], defaults: Optional[Config], unmanaged: Optional[Config]
) -> Config:
    """Determined's rules for ``config`` and the deprecated ``defaults`` / ``unmanaged``."""
    if defaults is not None or unmanaged is not None:
        warn_deprecated(
            "'defaults' and 'unmanaged' parameters have been deprecated and will be removed in a "
            "future version. Please use `config` instead.",
            stacklevel=4,
        )
    if config is not None:
        return config
    if defaults is None and get_cluster_info() is None:
        raise ValueError("either specify `defaults` or `config`, or run as a managed determined experiment")
    merged = defaults or Config()
    if unmanaged is not None:
        merged.project = merged.project or unmanaged.project
        merged.workspace = merged.workspace or unmanaged.workspace
        merged.external_experiment_id = merged.external_experiment_id or unmanaged.external_experiment_id
        merged.external_trial_id = merged.external_trial_id or unmanaged.external_trial_id
    return merged


def init_context(
    *,
    config: Optional[Config] = None,
    defaults: Optional[DefaultConfig] = None,
    unmanaged: Optional[UnmanagedConfig] = None,
    client: Any = None,
    distributed: Any = None,
    checkpoint_storage: Optional[Union[str, Dict[str, Any]]] = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = TensorboardMode.AUTO,
) -> Context:
    """The context-manager form: ``with core_v2.init_context(config=...) as core_context:``.
    ``client`` is accepted (det-lite's store is ``$DET_LITE_HOME``'s)."""
    merged = _merge_config(config, defaults, unmanaged)
    return _init_context(merged, distributed, checkpoint_storage, preempt_mode, tensorboard_mode)


def init(
    *,
    config: Optional[Config] = None,
    defaults: Optional[DefaultConfig] = None,
    unmanaged: Optional[UnmanagedConfig] = None,
    client: Any = None,
    distributed: Any = None,
    checkpoint_storage: Optional[Union[str, Dict[str, Any]]] = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: Any = TensorboardMode.AUTO,
) -> None:
    """The singleton form: fills ``core_v2.train``, ``.checkpoint``, ... (a previous context is
    closed first); ``close()`` runs at exit when the script did not call it."""
    global _context, _atexit_registered
    if _context is not None:
        _context.close()
    merged = _merge_config(config, defaults, unmanaged)
    _context = _init_context(merged, distributed, checkpoint_storage, preempt_mode, tensorboard_mode)
    _context.start()
    _set_globals(_context)
    if not _atexit_registered:
        atexit.register(close)
        _atexit_registered = True


def _set_globals(context: Context) -> None:
    global train, checkpoint, distributed, preempt, searcher, info
    train, checkpoint, distributed = context.train, context.checkpoint, context.distributed
    preempt, searcher, info = context.preempt, context.searcher, context.info


def close() -> None:
    """Close the singleton context (an unmanaged run records its end); as in Determined, only
    ``core_v2.train`` is cleared."""
    global _context, train
    if _context is not None:
        _context.close()
    _context = None
    train = None


def url_reverse_webui_exp_view() -> str:
    """Where the dashboard (``det-lite ui``) shows the experiment: the fragment to add to the
    URL ``det-lite ui`` prints (``#/experiments/<id>``); det-lite has no master URL."""
    if info is None:
        raise RuntimeError("call core_v2.init() first")
    return f"#/experiments/{info.trial.experiment_id}"
