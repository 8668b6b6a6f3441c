"""The peers: the benchmark's training work through Lightning's Trainer, Lightning Fabric and
Hugging Face Accelerate, each in lockstep with the same hand-written baseline as det-lite.

Each peer trains ``_trials.make_model(kind)`` on ``_trials.make_data(kind)`` with SGD +
momentum, the global batch of ``_trials.DATA`` and a torch ``DataLoader`` with shuffling,
written the way that peer's documentation writes it:

- ``lightning``: a ``LightningModule`` whose ``training_step`` returns the loss and logs it
  with ``self.log`` (the Trainer's default logger, TensorBoard, every 50 steps), run by
  ``Trainer.fit``; gradient aggregation is ``accumulate_grad_batches``. The lockstep runs in a
  ``Callback.on_train_batch_end``. Not timed and so turned off: the progress bar, the model
  summary, checkpointing (det-lite's end-of-training checkpoint is outside the timed windows too).
- ``fabric``: ``Fabric.setup`` / ``setup_dataloaders``, ``fabric.backward``,
  ``fabric.no_backward_sync`` on batches that do not step.
- ``accelerate``: ``Accelerator.prepare``, ``accelerator.accumulate(model)``,
  ``accelerator.backward``.

On 2 workers each runs under ``torch.distributed.run`` with its DDP strategy on gloo (Lightning
and Fabric ``strategy="ddp"``; Accelerate detects the torchrun environment), and the baseline
is ``_trials.DDPLoop`` built after the peer joined the process group. The lockstep is
``_trials.LockstepWindows``: after every optimizer step of the peer, as many baseline batches.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

FRAMEWORKS = ("lightning", "fabric", "accelerate")
# framework -> the module its install provides (the ``bench`` extra installs both)
PACKAGES = {"lightning": "lightning", "fabric": "lightning", "accelerate": "accelerate"}
# The search measure's peers (``_search_peers.py``), also in the ``bench`` extra.
SEARCH_PACKAGES = {"ray_tune": "ray", "optuna": "optuna"}
INSTALL_HINT = "pip install -c constraints.txt '.[bench]'"

Steps = Tuple[List[float], List[float]]


def missing(measures: Optional[Sequence[str]] = None) -> List[str]:
    """The peers' packages ``measures`` need (default: all) that are not installed (empty when
    ``--peers`` can run): ``search`` needs Ray Tune and Optuna, the others Lightning and Accelerate."""
    wanted = set()
    for measure in ("single", "ddp", "validation", "search") if measures is None else measures:
        if measure == "search":
            wanted.update(SEARCH_PACKAGES.values())
        elif measure in ("single", "ddp", "validation"):
            wanted.update(PACKAGES.values())
    return sorted({pkg for pkg in wanted if importlib.util.find_spec(pkg) is None})


def quiet() -> None:
    """Peers' informational warnings and log lines (e.g. "the dataloader has few workers") are
    advice for users, not results: keep them out of the benchmark's output (after the imports,
    which set their loggers' levels)."""
    import logging

    import accelerate  # noqa: F401
    import lightning  # noqa: F401

    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _loader(kind: str, per_rank_batch: int) -> Any:
    import torch
    from _trials import make_data

    return torch.utils.data.DataLoader(make_data(kind), batch_size=per_rank_batch, shuffle=True)


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


# --- Lightning Trainer ---------------------------------------------------------------------------


def lightning_lockstep(
    kind: str, batches: int, warmup: int, make_loop: Callable[[], Any], k: int = 1, width: int = 32
) -> Steps:
    """One lockstep run of Lightning's ``Trainer.fit`` against ``make_loop()``'s baseline."""
    import lightning.pytorch as pl
    import torch.nn.functional as F
    from _trials import DATA, LockstepWindows, make_model, make_optimizer

    size = _world_size()

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model(kind, width)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = F.cross_entropy(self.model(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return make_optimizer(self.model)

        def train_dataloader(self) -> Any:
            return _loader(kind, DATA[kind][1] // size)

    class Step(pl.Callback):
        windows: Optional[LockstepWindows] = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.windows = LockstepWindows(make_loop(), k)  # after the process group exists

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, i: int) -> None:
            assert self.windows is not None
            self.windows.after_batch(i)

    step = Step()
    with tempfile.TemporaryDirectory(prefix="bench-lightning-") as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=size,
            strategy="ddp" if size > 1 else "auto",
            max_steps=batches // k,
            accumulate_grad_batches=k,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            callbacks=[step],
        )
        trainer.fit(Module())
    assert step.windows is not None
    return step.windows.steps(warmup)


# --- Lightning Fabric ----------------------------------------------------------------------------


def fabric_lockstep(
    kind: str, batches: int, warmup: int, make_loop: Callable[[], Any], k: int = 1, width: int = 32
) -> Steps:
    """One lockstep run of a Fabric training loop against ``make_loop()``'s baseline."""
    import torch.nn.functional as F
    from _trials import DATA, LockstepWindows, make_model, make_optimizer
    from lightning.fabric import Fabric

    size = _world_size()
    fabric = Fabric(accelerator="cpu", devices=size, strategy="ddp" if size > 1 else "auto")
    fabric.launch()
    model = make_model(kind, width)
    model, opt = fabric.setup(model, make_optimizer(model))
    loader = fabric.setup_dataloaders(_loader(kind, DATA[kind][1] // size))
    windows = LockstepWindows(make_loop(), k)
    model.train()
    done, epoch = 0, 0
    while done < batches:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            accumulating = (done + 1) % k != 0
            with fabric.no_backward_sync(model, enabled=accumulating):
                loss = F.cross_entropy(model(x), y) / k
                fabric.backward(loss)
            if not accumulating:
                opt.step()
                opt.zero_grad()
            windows.after_batch(done)
            done += 1
            if done == batches:
                break
        epoch += 1
    return windows.steps(warmup)


# --- Accelerate ----------------------------------------------------------------------------------


def accelerate_lockstep(
    kind: str, batches: int, warmup: int, make_loop: Callable[[], Any], k: int = 1, width: int = 32
) -> Steps:
    """One lockstep run of an Accelerate training loop against ``make_loop()``'s baseline."""
    import torch.nn.functional as F
    from _trials import DATA, LockstepWindows, make_model, make_optimizer
    from accelerate import Accelerator

    size = _world_size()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=k)
    model = make_model(kind, width)
    model, opt, loader = accelerator.prepare(
        model, make_optimizer(model), _loader(kind, DATA[kind][1] // size)
    )
    windows = LockstepWindows(make_loop(), k)
    model.train()
    done, epoch = 0, 0
    while done < batches:
        loader.set_epoch(epoch)
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            windows.after_batch(done)
            done += 1
            if done == batches:
                break
        epoch += 1
    assert accelerator.gradient_accumulation_steps == k
    return windows.steps(warmup)


LOCKSTEP: Dict[str, Callable[..., Steps]] = {
    "lightning": lightning_lockstep,
    "fabric": fabric_lockstep,
    "accelerate": accelerate_lockstep,
}


def lockstep(framework: str, *args: Any, **kwargs: Any) -> Steps:
    """``LOCKSTEP[framework](*args, **kwargs)`` with the peers' advice kept quiet."""
    quiet()
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        return LOCKSTEP[framework](*args, **kwargs)
