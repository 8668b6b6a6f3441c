"""Determined's ``determined.pytorch.experimental.torch_batch_process``: batch inference over a
dataset sharded across the trial's workers, with progress checkpoints so a restarted trial
skips what was done (Determined 0.38's harness semantics).

It lives in ``core`` (it drives ``det.core.init()`` and uses the ``pytorch`` layer's
``DataLoader`` and reducers); the alias serves it as ``determined.pytorch.experimental``.
``upload_path()`` writes to ``<checkpoint root>/<output uuid>/rank_<r>/`` as Determined uploads
to its checkpoint storage (no ``metadata.json``: ``checkpoint gc`` leaves it alone).
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import math
import os
import pathlib
import uuid
import warnings
from typing import Any, Dict, Iterator, List, Optional, Set, Type

import torch

from determined_lite.core._checkpoint import checkpoint_root_of
from determined_lite.core._context import Context, init
from determined_lite.core._preempt import PreemptMode
from determined_lite.core._searcher import trial_operation
from determined_lite.pytorch._data import DataLoader
from determined_lite.pytorch._device import to_device
from determined_lite.pytorch._reducer import WrappedReducer, wrap_reducer
from determined_lite.runtime._cluster import get_cluster_info

logger = logging.getLogger("determined_lite")

DEFAULT_BATCH_SIZE = 1


class TorchBatchProcessorContext:
    """What a ``TorchBatchProcessor`` gets: device, hyperparameters, model preparation, output
    directory, metrics and reducers."""

    def __init__(self, core_context: Context, storage_path: str) -> None:
        self._core_context = core_context
        self.device = get_default_device(core_context)
        self._storage_path = storage_path
        self._use_default_storage = False
        self._wrapped_reducers: List[WrappedReducer] = []

    def get_hparams(self) -> Dict[str, Any]:
        info = get_cluster_info()
        if info is None:
            raise RuntimeError("Must run TorchBatchProcessor in a trial to run get_hparams()")
        return dict(info.trial.hparams)

    def to_device(self, data: Any, warned_types: Optional[Set[type]] = None) -> Any:
        return to_device(data, self.device, warned_types)

    def get_tensorboard_path(self) -> pathlib.Path:
        return pathlib.Path(self._core_context.train.get_tensorboard_path())

    def prepare_model_for_inference(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` in eval mode on this worker's device."""
        model.eval()
        model.to(self.device)
        return model

    @contextlib.contextmanager
    def upload_path(self) -> Iterator[pathlib.Path]:
        """This worker's output directory (``<checkpoint root>/<output uuid>/rank_<r>``)."""
        self._use_default_storage = True
        path = pathlib.Path(checkpoint_root_of(self._core_context.checkpoint), self._storage_path)
        path.mkdir(parents=True, exist_ok=True)
        yield path

    def report_metrics(self, group: str, steps_completed: int, metrics: Dict[str, Any]) -> None:
        self._core_context.train.report_metrics(group=group, steps_completed=steps_completed, metrics=metrics)

    def wrap_reducer(self, reducer: Any, name: Optional[str] = None) -> Any:
        """A custom reducer over every worker's values, reported as validation metrics at the end."""
        wrapped = wrap_reducer(reducer, name, for_training=False, for_validation=True)
        self._wrapped_reducers.append(wrapped)
        return wrapped.reducer

    def get_distributed_rank(self) -> int:
        return int(self._core_context.distributed.get_rank())

    def get_distributed_size(self) -> int:
        return int(self._core_context.distributed.get_size())


def get_default_device(core_context: Context) -> torch.device:
    if torch.cuda.device_count() == 0:
        return torch.device("cpu")
    return torch.device("cuda", core_context.distributed.local_rank)


class TorchBatchProcessor(abc.ABC):
    """The user's processing: ``process_batch`` for every batch of this worker's shard."""

    @abc.abstractmethod
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        """Set up what processing needs (the model, ...)."""

    @abc.abstractmethod
    def process_batch(self, batch: Any, batch_idx: int) -> None:
        """Process one batch; ``batch_idx`` counts this worker's batches."""

    def on_checkpoint_start(self) -> None:  # noqa: B027 -- optional hook
        """Called before each progress checkpoint."""

    def on_finish(self) -> None:  # noqa: B027 -- optional hook
        """Called once the shard is done."""


def _checkpoint(core_context: Context, steps_completed: int, output_uuid: str) -> None:
    """Every worker's steps; the chief records the smallest in a checkpoint."""
    steps = core_context.distributed.gather(steps_completed)
    if steps is None:
        return
    metadata = {"steps_completed": min(steps), "default_output_uuid": output_uuid}
    with core_context.checkpoint.store_path(metadata) as (path, _):
        with open(os.path.join(path, "batch_completed.json"), "w") as f:
            json.dump({"batch_completed": min(steps)}, f)


def _reduce_metrics(context: TorchBatchProcessorContext, core_context: Context, steps: int) -> None:
    reducers = context._wrapped_reducers
    if not reducers:
        return
    gathered = core_context.distributed.gather([r.reducer.per_slot_reduce() for r in reducers])
    if gathered is None:
        return
    metrics: Dict[str, Any] = {}
    for i, wrapped in enumerate(reducers):
        metrics.update(wrapped.finish([per_rank[i] for per_rank in gathered], "validation"))
    core_context.train.report_validation_metrics(steps_completed=steps, metrics=metrics)


def _batch_size(batch_size: Optional[int], kwargs: Dict[str, Any]) -> int:
    if kwargs.get("shuffle"):
        raise ValueError("'shuffle' must be false for accurate sharding and checkpointing")
    for name in ("sampler", "batch_sampler"):
        if name in kwargs:
            raise ValueError(f"Please remove '{name}' arg as we will initialize a {name} automatically.")
    kwargs.pop("shuffle", None)
    if batch_size is not None and "batch_size" in kwargs:
        raise ValueError("batch_size is passed into torch_batch_process and dataloader_kwargs")
    return int(batch_size if batch_size is not None else kwargs.pop("batch_size", DEFAULT_BATCH_SIZE))


def _iterate_length(max_batches: Optional[int], count: int) -> int:
    if max_batches is None:
        return count
    if max_batches <= 0 or max_batches > count:
        why = "is not valid" if max_batches <= 0 else "exceeds sharded dataset length"
        warnings.warn(
            f"iterate_length {max_batches} {why}. "
            "Ignoring this argument and iterate over entire dataset once",
            stacklevel=3,
        )
        return count
    return max_batches


def torch_batch_process(
    batch_processor_cls: Type[TorchBatchProcessor],
    dataset: Any,
    batch_size: Optional[int] = None,
    max_batches: Optional[int] = None,
    checkpoint_interval: int = 5,
    dataloader_kwargs: Optional[Dict[str, Any]] = None,
    distributed_context: Any = None,
) -> None:
    """Shard ``dataset`` across the trial's workers and run ``batch_processor_cls`` on each
    batch, checkpointing progress every ``checkpoint_interval`` batches (Determined's API)."""
    if checkpoint_interval <= 0:
        raise ValueError("checkpoint_interval should be a positive integer")
    info = get_cluster_info()
    if info is None:
        raise RuntimeError("torch_batch_process only runs on-cluster.")
    kwargs = dict(dataloader_kwargs or {})
    size = _batch_size(batch_size, kwargs)
    with init(distributed=distributed_context, preempt_mode=PreemptMode.WorkersAskChief) as core_context:
        dist = core_context.distributed
        if dist.size == 1 and len(info.slot_ids) > 1:
            raise ValueError(
                "In multi-slot managed cluster training, you must wrap your training script with a "
                "distributed launch layer such as determined.launch.torch_distributed"
            )
        _run(batch_processor_cls, dataset, size, max_batches, checkpoint_interval, kwargs, core_context)


def _run(
    processor_cls: Type[TorchBatchProcessor],
    dataset: Any,
    batch_size: int,
    max_batches: Optional[int],
    interval: int,
    kwargs: Dict[str, Any],
    core_context: Context,
) -> None:
    dist, info = core_context.distributed, get_cluster_info()
    rank, workers = dist.rank, dist.size
    output_uuid = dist.broadcast(str(uuid.uuid4()) if rank == 0 else None)
    skip = 0
    if info is not None and info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            with open(os.path.join(path, "metadata.json")) as f:
                metadata = json.load(f)
        skip, output_uuid = int(metadata["steps_completed"]), metadata["default_output_uuid"]
        logger.info("Previous run completed %s steps", skip)
    context = TorchBatchProcessorContext(core_context, f"{output_uuid}/rank_{rank}")
    processor = processor_cls(context=context)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, **kwargs).get_data_loader(
        repeat=False, skip=skip, num_replicas=workers, rank=rank
    )
    batches = iter(loader)
    length = _iterate_length(max_batches, math.ceil(len(dataset) / batch_size / workers))
    op = trial_operation(core_context.searcher, 1, rank == 0)
    last_checkpoint, batch_idx, steps = -1, skip, skip
    for batch_idx in range(skip, length):
        batch = next(batches, None)
        if batch is not None:
            processor.process_batch(batch=batch, batch_idx=batch_idx)
        steps = batch_idx + 1
        if steps % interval == 0:
            processor.on_checkpoint_start()
            _checkpoint(core_context, steps, output_uuid)
            last_checkpoint = batch_idx
            if rank == 0:
                op.report_progress(min(1.0, batch_idx * workers * batch_size / len(dataset)))
            if core_context.preempt.should_preempt():
                _reduce_metrics(context, core_context, steps)
                return
    if batch_idx > last_checkpoint:
        processor.on_checkpoint_start()
        _checkpoint(core_context, length, output_uuid)
    _reduce_metrics(context, core_context, steps)
    processor.on_finish()
    if rank == 0 and context._use_default_storage:
        where = os.path.join(checkpoint_root_of(core_context.checkpoint), output_uuid)
        logger.info("Files stored with default paths are at: %s", where)
    dist.gather(None)
    if rank == 0:
        op.report_completed(1)
