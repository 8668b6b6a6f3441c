"""The command-line options every step of the tutorial takes (Determined's MNIST example's)."""

from __future__ import annotations

import argparse


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Determined's Core API tutorial on scikit-learn's digits")
    parser.add_argument("--batch-size", type=int, default=64, help="training batch size (default: 64)")
    parser.add_argument("--test-batch-size", type=int, default=1000, help="test batch size (default: 1000)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs to train (default: 5)")
    parser.add_argument("--lr", type=float, default=1.0, help="Adadelta learning rate (default: 1.0)")
    parser.add_argument(
        "--gamma", type=float, default=0.7, help="learning rate decay per epoch (default: 0.7)"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=10, help="batches between training reports")
    return parser.parse_args()
