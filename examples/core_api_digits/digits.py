"""The model and data of the Core API tutorial: Determined's MNIST CNN, sized for 8x8 digits.

Data: scikit-learn's bundled digits (1797 images of 8x8 pixels, 10 classes; nothing is
downloaded), split once (stratified, ``random_state=0``): 1437 training and 360 test images.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_HPARAMS = {"n_filters1": 32, "n_filters2": 64, "dropout1": 0.25, "dropout2": 0.5}


class Net(nn.Module):
    """conv 3x3 -> conv 3x3 -> max-pool -> two dense layers (Determined's tutorial network)."""

    def __init__(self, hparams: Dict[str, Any]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, hparams["n_filters1"], 3, 1)  # 8x8 -> 6x6
        self.conv2 = nn.Conv2d(hparams["n_filters1"], hparams["n_filters2"], 3, 1)  # -> 4x4
        self.dropout1 = nn.Dropout(hparams["dropout1"])
        self.dropout2 = nn.Dropout(hparams["dropout2"])
        self.fc1 = nn.Linear(4 * hparams["n_filters2"], 128)  # 2x2 after pooling
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def datasets() -> Tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """Training and test sets: images as 1x8x8 float32 in [0, 1], labels as int64."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    def dataset(xs: np.ndarray, ys: np.ndarray) -> torch.utils.data.TensorDataset:
        images = torch.from_numpy((xs / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
        return torch.utils.data.TensorDataset(images, torch.from_numpy(ys.astype(np.int64)))

    return dataset(x_train, y_train), dataset(x_test, y_test)


def train_epoch(model: nn.Module, loader: Any, optimizer: Any) -> float:
    """One pass over ``loader``; returns the last batch's loss."""
    model.train()
    loss = torch.zeros(())
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    return float(loss.item())


def evaluate(model: nn.Module, loader: Any) -> Tuple[float, float, int]:
    """``(summed loss, correct predictions, records)`` over ``loader``."""
    model.eval()
    total, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            total += F.nll_loss(output, target, reduction="sum").item()
            correct += int((output.argmax(dim=1) == target).sum().item())
            n += len(target)
    return total, correct, n
