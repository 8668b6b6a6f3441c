"""Seeding a worker's random streams (``_rng.seed_everything``)."""

from __future__ import annotations

import random
from typing import List

import numpy as np
import pytest
import torch

from determined_lite.pytorch import _rng


def _draws() -> List[float]:
    return [random.random(), float(np.random.rand()), float(torch.rand(()))]


def test_seed_everything_seeds_python_numpy_and_torch_as_each_seeded_alone() -> None:
    _rng.seed_everything(1234)
    ours = _draws()
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    assert ours == _draws()


@pytest.mark.skipif(not _rng._cpu_only(), reason="this torch has a device backend")
def test_a_cpu_only_torch_seeds_its_one_generator_without_queueing_device_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch.manual_seed also queues a seed per device backend, recording the caller's stack
    each time (~4 ms in a forked worker); a CPU-only torch has none to seed."""
    calls: List[int] = []
    monkeypatch.setattr(torch, "manual_seed", lambda seed: calls.append(seed))
    _rng.seed_everything(7)
    assert calls == []
    assert torch.initial_seed() == 7


def test_a_torch_with_a_device_backend_seeds_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[int] = []
    monkeypatch.setattr(torch._C, "_has_cuda", True)
    monkeypatch.setattr(torch, "manual_seed", lambda seed: calls.append(seed))
    assert not _rng._cpu_only()
    _rng.seed_everything(7)
    assert calls == [7]
