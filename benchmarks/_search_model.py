"""The small trial of the search measure: the digits MLP, as det-lite, the limit and the peers run it.

The 8x8 digits (scikit-learn's, 1797 images) are written once by the benchmark to an ``.npz``
file (``write_digits``): importing scikit-learn and loading them costs ~2 s per process, more
than the trial's training, and would be the same for every side but the warm limit.
``hidden``, ``lr`` and ``dropout`` are the searched hyperparameters; a run trains
``batches`` batches of 64 (Adam, a reshuffled pass per epoch) and validates at given batches.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from determined_lite.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext

BATCH = 64


def write_digits(path: str) -> None:
    """The digits split (1437 training, 360 validation records) as an ``.npz`` file."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    xt, xv, yt, yv = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    np.savez(path, xt=(xt / 16.0).astype(np.float32), yt=yt, xv=(xv / 16.0).astype(np.float32), yv=yv)


def datasets(path: str) -> Tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    d = np.load(path)

    def ds(x: np.ndarray, y: np.ndarray) -> torch.utils.data.TensorDataset:
        return torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))

    return ds(d["xt"], d["yt"]), ds(d["xv"], d["yv"])


def build(hp: Dict[str, Any]) -> Tuple[nn.Module, torch.optim.Optimizer]:
    hidden = int(hp["hidden"])
    model = nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(float(hp["dropout"])), nn.Linear(hidden, 10)
    )
    return model, torch.optim.Adam(model.parameters(), lr=float(hp["lr"]))


def step(model: nn.Module, opt: torch.optim.Optimizer, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def evaluate(model: nn.Module, val: torch.utils.data.TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = val.tensors
        loss = float(F.cross_entropy(model(x), y))
    model.train()
    return loss


class PlainRun:
    """One trial in a plain loop: ``train_to(n)`` trains to batch ``n`` and validates."""

    def __init__(self, hp: Dict[str, Any], data_path: str) -> None:
        torch.manual_seed(int(hp.get("seed", 0)))  # a det-lite trial's seed: the same initial weights
        self.train_ds, self.val_ds = datasets(data_path)
        self.model, self.opt = build(hp)
        self.batches = 0
        self._it: Iterator[Any] = iter(())

    def _epoch(self) -> Iterator[Any]:
        """A reshuffled pass, batches indexed at once (the fastest loader: a strict limit)."""
        x, y = self.train_ds.tensors
        order = torch.randperm(len(y))
        for i in range(0, len(y), BATCH):
            idx = order[i : i + BATCH]
            yield x[idx], y[idx]

    def _next(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._it = self._epoch()
            return next(self._it)

    def train_to(self, batches: int) -> float:
        while self.batches < batches:
            step(self.model, self.opt, self._next())
            self.batches += 1
        return evaluate(self.model, self.val_ds)


def time_plain(runs: Sequence[Tuple[Dict[str, Any], List[int]]], data_path: str) -> float:
    """Seconds to train ``runs`` (hparams, validation points) back to back in this process."""
    start = time.perf_counter()
    for hp, points in runs:
        run = PlainRun(hp, data_path)
        for n in points:
            run.train_to(n)
    return time.perf_counter() - start


class SearchTrial(PyTorchTrial):
    """The same work as :class:`PlainRun` through det-lite (``data_path`` is a hyperparameter)."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.train_ds, self.val_ds = datasets(os.path.abspath(context.get_hparam("data_path")))
        model, opt = build(context.get_hparams())
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(opt)
        self.stamps = context.get_hparams().get("stamp_dir")
        self.stamped = False
        self.validated_at: Any = None  # when this process's last validation ended

    def _stamp(self, promoted_at: Any = None) -> None:
        """Append this run's start (the runner wrote its spec just before starting it) and its
        first batch's end to ``stamp_dir/trial_N.jsonl``; ``promoted_at``: a promotion in this
        process, timed from the end of the rung's validation instead."""
        import json

        spec_path = os.environ["DET_LITE_TRIAL_SPEC"]
        with open(spec_path) as f:
            spec = json.load(f)
        line = {"spec": os.stat(spec_path).st_mtime, "first_batch": time.time()}
        line["resumed"] = bool(spec.get("latest_checkpoint"))
        if promoted_at is not None:
            line.update(spec=promoted_at, in_process=True)
        with open(os.path.join(self.stamps, f"trial_{spec['trial_id']}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self.train_ds, batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_ds, batch_size=len(self.val_ds))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        if self.stamps and not self.stamped:
            self.stamped = True
            self._stamp()
        elif self.stamps and self.validated_at is not None:  # validations end rungs here
            self._stamp(promoted_at=self.validated_at)
        self.validated_at = None
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.validated_at = time.time()
        return {"validation_loss": loss}
