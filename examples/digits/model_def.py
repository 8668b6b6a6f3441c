"""A small MLP on scikit-learn's bundled 8x8 digits (1797 images, 10 classes).

Nothing is downloaded: ``sklearn.datasets.load_digits`` ships with scikit-learn.
The train/validation split is deterministic (stratified, ``random_state=0``):
1437 training and 360 validation records.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from determined_lite.pytorch import (
    DataLoader,
    LRScheduler,
    MetricReducer,
    PyTorchTrial,
    PyTorchTrialContext,
)

NUM_CLASSES = 10
NUM_FEATURES = 64  # 8x8 pixels


@functools.lru_cache(maxsize=1)
def load_splits() -> Tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """Deterministic train/validation split, features scaled to [0, 1], float32."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    def to_dataset(xs: np.ndarray, ys: np.ndarray) -> torch.utils.data.TensorDataset:
        features = torch.from_numpy((xs / 16.0).astype(np.float32))
        labels = torch.from_numpy(ys.astype(np.int64))
        return torch.utils.data.TensorDataset(features, labels)

    return to_dataset(x_train, y_train), to_dataset(x_val, y_val)


class ConfusionMatrixReducer(MetricReducer):
    """Distributed-aware confusion matrix: each slot counts its own records, the chief sums.

    ``per_slot_reduce`` ships one small int matrix per slot instead of every prediction.
    Registered with ``name=None``, so ``cross_slot_reduce`` returns a dict of metrics.
    """

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.matrix = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def update(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> None:
        t = torch.as_tensor(y_true).detach().cpu().reshape(-1).numpy().astype(np.int64)
        p = torch.as_tensor(y_pred).detach().cpu().reshape(-1).numpy().astype(np.int64)
        counts = np.bincount(t * self.num_classes + p, minlength=self.num_classes**2)
        self.matrix += counts.reshape(self.num_classes, self.num_classes)

    def per_slot_reduce(self) -> np.ndarray:
        return self.matrix.copy()

    def cross_slot_reduce(self, per_slot_metrics: Sequence[np.ndarray]) -> Dict[str, Any]:
        matrix = np.sum(np.stack(list(per_slot_metrics)), axis=0)
        support = matrix.sum(axis=1)
        seen = support > 0
        recall = np.diag(matrix)[seen] / support[seen]
        balanced_accuracy = float(recall.mean()) if recall.size else 0.0
        return {
            "confusion_matrix": matrix.tolist(),  # rows: true class, columns: predicted
            "balanced_accuracy": balanced_accuracy,
        }


def build_model(hidden_size: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(NUM_FEATURES, hidden_size),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_size, NUM_CLASSES),
    )


class DigitsTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.train_ds, self.val_ds = load_splits()

        self.model = context.wrap_model(
            build_model(int(context.get_hparam("hidden_size")), float(context.get_hparam("dropout")))
        )
        self.opt = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=float(context.get_hparam("lr")))
        )
        self.lr_sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(
                self.opt,
                step_size=int(context.get_hparam("lr_step_size")),  # in epochs
                gamma=float(context.get_hparam("lr_gamma")),
            ),
            step_mode=LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )
        self.confusion = context.wrap_reducer(
            ConfusionMatrixReducer(num_classes=NUM_CLASSES), name=None, for_training=False
        )

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self.train_ds, batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_ds, batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss, "lr": self.lr_sched.get_last_lr()[0]}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        pred = logits.argmax(dim=1)
        self.confusion.update(y, pred)
        return {
            "validation_loss": F.cross_entropy(logits, y),
            "accuracy": (pred == y).float().mean(),
        }
