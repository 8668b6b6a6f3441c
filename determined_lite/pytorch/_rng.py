"""The random streams of a worker (python, numpy, torch, CUDA): seeded once, saved, restored exactly.

:func:`capture_rng_state` returns only what ``torch.load(..., weights_only=True)`` accepts —
dicts, lists, ints, floats, strings and tensors — so that a checkpoint holding it loads without
unpickling arbitrary objects. Python's Mersenne Twister state is 625 ints, numpy's legacy
``RandomState`` is named with its 624 uint32 keys as ints; both round-trip bit for bit.
"""

from __future__ import annotations

import random
from typing import Any, Dict

import numpy as np
import torch

PYTHON, NUMPY, TORCH, CUDA = "python", "numpy", "torch", "cuda"


def capture_rng_state() -> Dict[str, Any]:
    """Python, numpy, torch and (if present) CUDA generator states, in plain values and tensors."""
    version, internal, gauss = random.getstate()
    legacy = np.random.get_state(legacy=True)  # the global RandomState is always MT19937
    assert isinstance(legacy, tuple), "numpy's global RandomState must be an MT19937"
    name, keys, pos, has_gauss, cached_gaussian = legacy
    state: Dict[str, Any] = {
        PYTHON: {"version": version, "state": list(internal), "gauss": gauss},
        NUMPY: {
            "bit_generator": str(name),
            "keys": [int(k) for k in keys.tolist()],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        TORCH: torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state[CUDA] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    """Restore :func:`capture_rng_state`'s states (also the tuples of checkpoints written before
    det-lite stored them as plain values)."""
    python = state[PYTHON]
    if isinstance(python, dict):
        python = (python["version"], tuple(python["state"]), python["gauss"])
    random.setstate(python)
    numpy = state[NUMPY]
    if isinstance(numpy, dict):
        numpy = (
            numpy["bit_generator"],
            np.asarray(numpy["keys"], dtype=np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    np.random.set_state(numpy)
    torch.random.set_rng_state(state[TORCH])
    if CUDA in state and torch.cuda.is_available():
        saved = state[CUDA]
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) from one trial seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if _cpu_only():
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _cpu_only() -> bool:
    """Whether the CPU's is this process's only torch generator: a torch built without CUDA, MPS
    or XPU, with no MTIA device and no custom device backend. ``torch.manual_seed`` would also
    queue a seed for each of those devices' lazy start, recording the caller's stack each time
    (~4 ms in a worker forked warm, a tenth of its set-up)."""
    devices = (torch._C._has_cuda, torch._C._has_mps, getattr(torch._C, "_has_xpu", False))
    if any(devices) or hasattr(torch, torch._C._get_privateuse1_backend_name()):
        return False
    mtia = getattr(torch, "mtia", None)
    return mtia is None or not mtia.is_available()
