"""The benchmark trial and the hand-written loops it is compared with: same models, data, optimizer.

``BenchTrial`` trains ``make_model(kind)`` on ``make_data(kind)`` with SGD + momentum through
det-lite's real loop. The baseline loops (``PlainLoop``, ``HorovodLoop``, ``DDPLoop``; one batch
per ``step()``) do the same work the way a user writes it without det-lite: a
``torch.utils.data.DataLoader``, the model, ``loss.backward()``, ``opt.step()``,
``opt.zero_grad()``. :func:`lockstep` runs a baseline loop inside det-lite's loop, optimizer
step by optimizer step, and times both sides.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from _plain import (  # noqa: F401 -- re-exported: the measures import them from here
    CLASSES,
    CNN_SHAPE,
    DATA,
    LR,
    MLP_HIDDEN,
    MLP_IN,
    MOMENTUM,
    SEED,
    PlainLoop,
    batches_forever,
    make_data,
    make_model,
    make_optimizer,
)

from determined_lite import pytorch as det

# --- det-lite side --------------------------------------------------------------------------------


class Timer(det.PyTorchCallback):
    """``time.perf_counter()`` at the end of every training batch."""

    def __init__(self) -> None:
        self.times: List[float] = []

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.times.append(time.perf_counter())


class BenchTrial(det.PyTorchTrial):
    """hparams: ``kind`` (mlp or cnn), ``width`` (cnn) and ``global_batch_size``.

    ``extra_callbacks`` (set before ``fit``) join the timer in ``build_callbacks``.
    """

    def __init__(self, context: det.PyTorchTrialContext) -> None:
        self.context = context
        self.kind = context.get_hparam("kind")
        self.model = context.wrap_model(make_model(self.kind, context.get_hparams().get("width", 32)))
        self.opt = context.wrap_optimizer(make_optimizer(self.model))
        self.timer = Timer()
        self.extra_callbacks: Dict[str, det.PyTorchCallback] = {}

    def build_training_data_loader(self) -> det.DataLoader:
        return det.DataLoader(
            make_data(self.kind), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> det.DataLoader:
        return det.DataLoader(make_data(self.kind, 64), batch_size=32)

    def build_callbacks(self) -> Dict[str, det.PyTorchCallback]:
        return {"timer": self.timer, **self.extra_callbacks}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        return {"val_loss": F.cross_entropy(self.model(x), y)}


def det_lite_times(
    kind: str,
    batches: int,
    distributed: Any = None,
    aggregation_frequency: int = 1,
    workdir: Optional[str] = None,
    width: int = 32,
    callbacks: Optional[Dict[str, det.PyTorchCallback]] = None,
    compile: Any = None,  # noqa: A002 -- init(compile=...)
) -> List[float]:
    """Train ``BenchTrial`` with ``init()`` + ``Trainer.fit`` (the loop every det-lite worker runs);
    returns the end time of every training batch. Checkpoints go to a temporary folder.
    ``compile``: ``init(compile=...)`` (``optimizations.compile``)."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-det-"))
        info = det.TrialInfo(
            trial_seed=1,
            checkpoint_root=os.path.join(workdir, "checkpoints"),
            tensorboard_path=os.path.join(workdir, "tensorboard"),
        )
        with det.init(
            hparams={"global_batch_size": DATA[kind][1], "kind": kind, "width": width},
            exp_conf={"optimizations": {"aggregation_frequency": aggregation_frequency}},
            distributed=distributed,
            trial_info=info,
            compile=compile,
        ) as ctx:
            trial = BenchTrial(ctx)
            trial.extra_callbacks = dict(callbacks or {})
            # progress=False: the table (or --json) owns stdout
            det.Trainer(trial, ctx).fit(max_length=det.Batch(batches), progress=False)
        return trial.timer.times


# --- distributed baselines ---------------------------------------------------------------------------


class HorovodLoop:
    """The loop of Horovod's PyTorch guide, one batch per :meth:`step`: DistributedSampler,
    ``broadcast_parameters``, ``hvd.DistributedOptimizer(backward_passes_per_step=k)``.
    Every rank must build it at the same point (it broadcasts)."""

    def __init__(self, kind: str, k: int = 1, width: int = 32) -> None:
        import horovod.torch as hvd

        data = make_data(kind)
        self.sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=SEED
        )
        loader = torch.utils.data.DataLoader(
            data, batch_size=DATA[kind][1] // hvd.size(), sampler=self.sampler
        )
        self.model = make_model(kind, width)
        named = [(f"baseline.{n}", p) for n, p in self.model.named_parameters()]
        self.opt = hvd.DistributedOptimizer(
            make_optimizer(self.model), named_parameters=named, backward_passes_per_step=k
        )
        hvd.broadcast_parameters(
            {f"baseline.{n}": t for n, t in self.model.state_dict().items()}, root_rank=0
        )
        self.model.train()
        self.k, self.done = k, 0
        self._it = batches_forever(loader, self.sampler)

    def step(self) -> None:
        x, y = next(self._it)
        loss = F.cross_entropy(self.model(x), y) / self.k
        loss.backward()
        self.done += 1
        if self.done % self.k == 0:
            self.opt.step()
            self.opt.zero_grad()


class DDPLoop:
    """The loop of PyTorch's DDP tutorial, one batch per :meth:`step` (process group already
    joined): DistributedSampler, ``DDP(model)``, ``no_sync()`` on batches that do not step.
    Every rank must build it at the same point (DDP broadcasts the initial parameters)."""

    def __init__(self, kind: str, k: int = 1, width: int = 32) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        rank, size = dist.get_rank(), dist.get_world_size()
        data = make_data(kind)
        self.sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_replicas=size, rank=rank, shuffle=True, seed=SEED
        )
        loader = torch.utils.data.DataLoader(data, batch_size=DATA[kind][1] // size, sampler=self.sampler)
        self.model = DDP(make_model(kind, width))
        self.opt = make_optimizer(self.model)
        self.model.train()
        self.k, self.done = k, 0
        self._it = batches_forever(loader, self.sampler)

    def step(self) -> None:
        x, y = next(self._it)
        update = (self.done + 1) % self.k == 0
        with contextlib.nullcontext() if update else self.model.no_sync():
            loss = F.cross_entropy(self.model(x), y) / self.k
            loss.backward()
        if update:
            self.opt.step()
            self.opt.zero_grad()
        self.done += 1


# --- lockstep ---------------------------------------------------------------------------------------


class LockstepWindows:
    """Runs a baseline loop in lockstep with another training loop (det-lite's or a peer's):
    after every ``k`` batches of that loop (one optimizer step), ``k`` baseline batches, and
    records their ``(start, end)``. Framework-neutral: the loop under test calls
    :meth:`after_batch` at the end of each of its training batches.

    Whole windows, not single batches, alternate: with gradient aggregation only a window's
    last batch communicates, and that all-reduce absorbs how far the ranks drifted apart since
    the previous one; alternating windows charges each side its own drift.
    """

    def __init__(self, loop: Any, k: int = 1) -> None:
        self.loop, self.k = loop, k
        self.spans: List[Tuple[float, float]] = []

    def after_batch(self, batch_idx: int) -> None:
        if (batch_idx + 1) % self.k:
            return
        start = time.perf_counter()
        for _ in range(self.k):
            self.loop.step()
        self.spans.append((start, time.perf_counter()))

    def steps(self, warmup: int) -> Tuple[List[float], List[float]]:
        """Step times ``(loop under test, baseline)``, warm-up batches left out: one entry per
        optimizer step, the mean batch time of its window of ``k`` batches.

        A window of the loop under test runs from the end of one baseline window to the start
        of the next: whole batches of that loop (data, the step, hooks, bookkeeping, reports).
        """
        k = self.k
        spans = self.spans[max(1, -(-warmup // k)) - 1 :]
        ours = [(start - prev_end) / k for (_, prev_end), (start, _) in zip(spans, spans[1:])]
        base = [(end - start) / k for start, end in spans[1:]]
        return ours, base


class Lockstep(det.PyTorchCallback):
    """det-lite's side of :class:`LockstepWindows`: a callback at the end of every training batch."""

    def __init__(self, loop: Any, k: int = 1) -> None:
        self.windows = LockstepWindows(loop, k)

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.windows.after_batch(batch_idx)


def lockstep(
    kind: str,
    batches: int,
    warmup: int,
    make_loop: Callable[[], Any],
    distributed: Any = None,
    aggregation_frequency: int = 1,
    width: int = 32,
) -> Tuple[List[float], List[float]]:
    """Step times ``(det_lite, baseline)`` of one det-lite :class:`Lockstep` run (see
    :meth:`LockstepWindows.steps`)."""
    k = aggregation_frequency
    lock = Lockstep(make_loop(), k)
    det_lite_times(kind, batches, distributed, k, width=width, callbacks={"lockstep": lock})
    return lock.windows.steps(warmup)


def lockstep_aa(make_loop: Callable[[], Any], batches: int, warmup: int) -> Tuple[List[float], List[float]]:
    """Two identical baseline loops alternating batch by batch, timed like :func:`lockstep`: the
    ratio of two identical loops shows how precise a lockstep ratio is on this machine."""
    first, second = make_loop(), make_loop()
    spans: List[Tuple[float, float, float]] = []
    for _ in range(batches):
        start = time.perf_counter()
        first.step()
        middle = time.perf_counter()
        second.step()
        spans.append((start, middle, time.perf_counter()))
    kept = spans[warmup:]
    return [m - s for s, m, _ in kept], [e - m for _, m, e in kept]
