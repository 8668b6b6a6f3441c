"""A checkpoint state of plain values and plain tensors is known to load with
``weights_only=True`` without test-loading the written file (``_checkpoint.plainly_loadable``);
any other state is still test-loaded, and refused when torch's weights-only unpickler refuses it.
"""

from __future__ import annotations

import collections
import datetime
import io
from typing import Any, Dict, List

import numpy as np
import pytest
import torch

from determined_lite import pytorch
from determined_lite.pytorch import _checkpoint
from tests.fixtures.resume_mlp import ResumeMLPTrial


def _plain_states() -> List[Any]:
    shared = [1, 2.5, "x"]
    return [
        {},
        {"a": 1, "b": 2.0, "c": "s", "d": None, "e": True, 3: [1, (2, 3)]},
        collections.OrderedDict(w=torch.ones(2, 3), b=torch.zeros(3, dtype=torch.float64)),
        {"p": torch.nn.Parameter(torch.ones(4)), "view": torch.arange(10)[2:7], "t": torch.ones(3, 2).t()},
        {"dtypes": [torch.ones(2, dtype=d) for d in (torch.bfloat16, torch.int8, torch.bool, torch.cfloat)]},
        {"one": shared, "again": shared, "rng": list(range(625))},
    ]


@pytest.mark.parametrize("state", _plain_states())
def test_what_the_walk_accepts_loads_weights_only(state: Any) -> None:
    assert _checkpoint.plainly_loadable(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert type(loaded) is type(state) and list(loaded) == list(state)


class _Thing:
    pass


class _SubTensor(torch.Tensor):
    pass


def _tensor_with_attribute() -> torch.Tensor:
    t = torch.ones(2)
    t.note = "x"  # type: ignore[attr-defined]
    return t


def _not_plain() -> Dict[str, Any]:
    return {
        "object": {"x": _Thing()},
        "numpy scalar": {"x": np.float32(1.0)},
        "numpy array": {"x": np.ones(2)},
        "date": {"x": datetime.date(2024, 1, 2)},
        "set": {"x": {1, 2}},
        "tuple key": {(1, 2): 3},
        "tensor subclass": {"x": torch.ones(2).as_subclass(_SubTensor)},
        "tensor attribute": {"x": _tensor_with_attribute()},
        "sparse": {"x": torch.eye(2).to_sparse()},
        "float8": {"x": torch.ones(2).to(torch.float8_e4m3fn)},
        "size": {"x": torch.Size([2])},
        "nested deep": {"a": [{"b": (1, [_Thing()])}]},
    }


@pytest.mark.parametrize("name", sorted(_not_plain()))
def test_anything_else_is_not_known_plain(name: str) -> None:
    assert not _checkpoint.plainly_loadable(_not_plain()[name])


def test_a_cycle_ends_the_walk() -> None:
    looped: List[Any] = [1, torch.ones(1)]
    looped.append(looped)
    assert _checkpoint.plainly_loadable({"loop": looped})
    looped.append(_Thing())
    assert not _checkpoint.plainly_loadable({"loop": looped})


def _save(tmp_path: Any, state: Dict[str, Any]) -> str:
    path = str(tmp_path / "state.pth")
    torch.save(state, path)
    return path


def test_a_plain_state_is_not_test_loaded(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"w": torch.ones(2), "n": 3}
    path = _save(tmp_path, state)
    calls: List[Any] = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a))
    _checkpoint.check_loadable(path, state)
    assert calls == []
    other = {"size": torch.Size([2])}  # loads weights-only, but not known plain: test-loaded
    _checkpoint.check_loadable(_save(tmp_path, other), other)
    assert len(calls) == 1


def test_other_states_are_still_checked(tmp_path: Any) -> None:
    allowed = {"size": torch.Size([2, 3]), "device": torch.device("cpu"), "dtype": torch.float16}
    _checkpoint.check_loadable(_save(tmp_path, allowed), allowed)
    refused = {"when": datetime.date(2024, 1, 2)}
    with pytest.raises(_checkpoint.UnloadableStateError, match=r"state\['when'\] is a datetime.date"):
        _checkpoint.check_loadable(_save(tmp_path, refused), refused)


def test_det_lites_own_checkpoint_state_takes_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state the trainer writes (model, optimizer, LR scheduler, RNGs, callbacks, trainer
    progress) is plain: its checkpoints skip the test load."""
    seen: List[bool] = []
    walk = _checkpoint.plainly_loadable
    monkeypatch.setattr(_checkpoint, "plainly_loadable", lambda state: seen.append(walk(state)) or seen[-1])
    hparams = {"lr": 0.05, "global_batch_size": 4, "lr_step_mode": "STEP_EVERY_BATCH"}
    with pytorch.init(hparams=hparams, exp_conf={"reproducibility": {"experiment_seed": 3}}) as ctx:
        result = pytorch.Trainer(ResumeMLPTrial(ctx), ctx).fit(
            max_length=pytorch.Batch(4), checkpoint_period=pytorch.Batch(2)
        )
    assert len(result.checkpoints) == 2
    assert seen == [True, True]
