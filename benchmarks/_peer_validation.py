"""Measure 4 with the peers: the same 2-worker validation through Lightning's Trainer, Fabric and
Accelerate, each paired with the same hand-written validation as det-lite (``_validation.Baseline``).

Every peer computes the same metrics on the same records as det-lite's ``ValTrial`` (four
per-batch metrics: two averages, a max and a sum; a confusion matrix -> balanced accuracy and
macro precision; the median per-record loss), the way its documentation does it:

- ``lightning``: ``self.log(..., sync_dist=True)`` in ``validation_step`` (``reduce_fx`` max and
  sum where needed), and ``self.all_gather`` of the confusion matrix and of the per-record losses
  in ``on_validation_epoch_end``; the Trainer validates after every training batch
  (``val_check_interval=1``) and is timed from ``Callback.on_validation_start`` to
  ``on_validation_end``, where its metrics must already be there.
- ``fabric`` / ``accelerate``: neither has metric machinery, so the loop is the hand-written
  one (``_validation.accumulate`` and ``merge``) on the peer's prepared model and loader, with
  one ``fabric.all_gather`` / ``accelerator.gather`` of a dict of tensors in place of the
  baseline's ``all_gather_object`` (they gather a dict tensor by tensor); the loops train one
  batch between validations.

The learning rate is 0, so the weights never change, and every peer validation must agree with
its paired baseline (a job whose metrics differ fails). ``collectives`` counts the calls into
``torch.distributed``'s public collectives made during a peer validation (det-lite's context
``allgather`` is one such call, ``all_gather_object``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as tdist
import torch.nn.functional as F
from _validation import BATCH, Baseline, accumulate, batch_outputs, confusion_metrics, merge

# torch.distributed's public collectives: the calls a validation's count is made of.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "gather",
    "gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "all_to_all",
)


class Counter:
    """Counts the calls to ``torch.distributed``'s collectives while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.count = 0
        for name in COLLECTIVES:
            if hasattr(tdist, name):
                setattr(tdist, name, self._counting(getattr(tdist, name)))

    def _counting(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                self.count += 1
            return fn(*args, **kwargs)

        return wrapper


class Record:
    """Each side's validation times and metrics, and the peer's collectives per validation."""

    def __init__(self, baseline: Baseline, counter: Counter) -> None:
        self.baseline, self.counter = baseline, counter
        self.peer: List[float] = []
        self.base: List[float] = []
        self.counts: List[int] = []
        self.peer_metrics: List[Dict[str, float]] = []
        self.base_metrics: List[Dict[str, Any]] = []
        self._start = 0.0

    def run_baseline(self) -> None:
        tdist.barrier()  # both ranks start aligned (outside the timing)
        start = time.perf_counter()
        self.base_metrics.append(self.baseline.validate())
        self.base.append(time.perf_counter() - start)

    def peer_start(self) -> None:
        self.counter.count = 0
        self.counter.active = True
        self._start = time.perf_counter()

    def peer_end(self, metrics: Dict[str, Any]) -> None:
        self.peer.append(time.perf_counter() - self._start)
        self.counter.active = False
        self.counts.append(self.counter.count)
        self.peer_metrics.append({k: float(v) for k, v in metrics.items()})


def _gathered(
    gather: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]], mine: Tuple
) -> List[Tuple]:
    """``mine`` (``_validation.accumulate``'s partial results) from every rank, through the
    peer's tensor ``gather`` (which stacks each tensor of a dict along a new first dimension
    (Fabric) or concatenates along the first (Accelerate): reshaped by world size here)."""
    loss_sum, correct, max_logit, errors, n, cm, losses = mine
    size = tdist.get_world_size()
    out = gather(
        {
            "stats": torch.tensor([[loss_sum, correct, max_logit, errors, n]], dtype=torch.float64),
            "cm": torch.from_numpy(cm).reshape(1, -1),
            "losses": torch.from_numpy(np.concatenate(losses)).reshape(1, -1),
        }
    )
    stats, cms, per_record = (out[k].reshape(size, -1) for k in ("stats", "cm", "losses"))
    return [
        (
            *(float(v) for v in stats[r][:3]),
            int(stats[r][3]),
            int(stats[r][4]),
            cms[r].numpy(),
            [per_record[r].numpy()],
        )
        for r in range(size)
    ]


def _validate(model: Any, loader: Any, classes: int, gather: Callable) -> Dict[str, Any]:
    """The hand-written validation's work, with the peer's loader and gather."""
    model.eval()
    mine = accumulate(model, loader, classes)
    model.train()
    return merge(_gathered(gather, mine), classes)


# --- the peers -----------------------------------------------------------------------------------


def lightning_validation(record: Record, records: int, validations: int, classes: int) -> None:
    import lightning.pytorch as pl
    from _trials import make_data, make_model

    class ValModule(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model("mlp")
            self.cm = torch.zeros(classes * classes, dtype=torch.int64)
            self.losses: List[torch.Tensor] = []

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(make_data("mlp", 1024), batch_size=BATCH // 2)

        def val_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(make_data("mlp", records), batch_size=BATCH)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.model.parameters(), lr=0.0)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def on_validation_epoch_start(self) -> None:
            self.cm = torch.zeros(classes * classes, dtype=torch.int64)
            self.losses = []

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            out = batch_outputs(self.model, x, y)
            b = len(y)
            self.log("val_loss", out["val_loss"], batch_size=b, sync_dist=True)
            self.log("accuracy", out["accuracy"], batch_size=b, sync_dist=True)
            self.log("max_logit", out["max_logit"], batch_size=b, reduce_fx="max", sync_dist=True)
            self.log("errors", out["errors"].float(), batch_size=b, reduce_fx="sum", sync_dist=True)
            self.cm += torch.bincount(y * classes + out["preds"], minlength=classes * classes)
            self.losses.append(out["per_record"])

        def on_validation_epoch_end(self) -> None:
            cm = self.all_gather(self.cm).sum(0).numpy().reshape(classes, classes)
            for name, value in confusion_metrics(cm).items():
                self.log(name, value)
            losses = self.all_gather(torch.cat(self.losses))
            self.log("median_loss", float(np.median(losses.reshape(-1).numpy())))

    class Probe(pl.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, i: int) -> None:
            record.run_baseline()

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            record.peer_start()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            record.peer_end(trainer.callback_metrics)

    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-lightning-val-") as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=tdist.get_world_size(),
            strategy="ddp",
            max_steps=validations,
            val_check_interval=1,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            callbacks=[Probe()],
        )
        trainer.fit(ValModule())


def fabric_validation(record: Record, records: int, validations: int, classes: int) -> None:
    from _trials import make_data, make_model
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=tdist.get_world_size(), strategy="ddp")
    fabric.launch()
    model = make_model("mlp")
    model, opt = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.0))
    train, val = fabric.setup_dataloaders(
        torch.utils.data.DataLoader(make_data("mlp", 1024), batch_size=BATCH // 2),
        torch.utils.data.DataLoader(make_data("mlp", records), batch_size=BATCH),
    )
    _train_and_validate(
        model,
        opt,
        train,
        fabric.backward,
        lambda: _validate(model, val, classes, fabric.all_gather),
        record,
        validations,
    )


def accelerate_validation(record: Record, records: int, validations: int, classes: int) -> None:
    from _trials import make_data, make_model
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = make_model("mlp")
    model, opt, train, val = accelerator.prepare(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        torch.utils.data.DataLoader(make_data("mlp", 1024), batch_size=BATCH // 2),
        torch.utils.data.DataLoader(make_data("mlp", records), batch_size=BATCH),
    )
    _train_and_validate(
        model,
        opt,
        train,
        accelerator.backward,
        lambda: _validate(model, val, classes, accelerator.gather),
        record,
        validations,
    )


def _train_and_validate(
    model: Any,
    opt: Any,
    train: Any,
    backward: Callable[[Any], None],
    validate: Callable[[], Dict[str, float]],
    record: Record,
    validations: int,
) -> None:
    """One training batch, the paired baseline validation, then the peer's validation; repeat."""
    batches = iter(train)
    for _ in range(validations):
        x, y = next(batches)
        backward(F.cross_entropy(model(x), y))
        opt.step()
        opt.zero_grad()
        record.run_baseline()
        record.peer_start()
        record.peer_end(validate())


VALIDATIONS: Dict[str, Callable[[Record, int, int, int], None]] = {
    "lightning": lightning_validation,
    "fabric": fabric_validation,
    "accelerate": accelerate_validation,
}


def worker(framework: str, records: int, validations: int) -> Optional[Dict[str, Any]]:
    """One of the 2 workers; on rank 0 returns the job's results in ``_validation``'s format."""
    import _peers
    from _trials import CLASSES
    from _validation import compare_metrics

    _peers.quiet()
    tdist.init_process_group("gloo")  # torchrun's environment; the peer finds it joined
    rank = tdist.get_rank()
    counter = Counter()
    record = Record(Baseline("torch", records, rank, tdist.get_world_size()), counter)
    VALIDATIONS[framework](record, records, validations, CLASSES)
    mismatch = None
    for ours, base in zip(record.peer_metrics, record.base_metrics):
        mismatch = mismatch or compare_metrics(ours, base)
    tdist.destroy_process_group()
    if rank != 0:
        return None
    return {
        "det_lite": record.peer,
        "baseline": record.base,
        "collectives": record.counts,
        "sites": [],
        "match": mismatch is None and len(record.peer) == len(record.base) == validations,
        "mismatch": mismatch or f"{len(record.peer)} {framework} and {len(record.base)} baseline runs",
    }
