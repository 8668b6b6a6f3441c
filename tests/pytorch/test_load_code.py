"""Which code a trusted load runs (issue 30, item 6, from Determined's harness tests): each load
imports the trial class from its own checkpoint's code/ (Determined's det.import_from_path) and
leaves sys.path and sys.modules as they were; a checkpoint of the pre-0.12.13 API (build_model(),
no load_data.json) loads as that model with its weights, as Determined returns it.

Before: the first trusted load left its code/ on sys.path and its model_def imported, so the
second load ran the first checkpoint's class; a 0.13 checkpoint gave a trial wrapping no model."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import torch

from determined_lite import pytorch
from determined_lite.compat import install_alias
from tests.fixtures.determined_ckpts import sgd_state, write_current, write_legacy

# A trial of Determined's current API; VERSION and the hparam it requires differ per checkpoint.
CURRENT = '''
import torch
from determined import pytorch


class Trial(pytorch.PyTorchTrial):
    VERSION = {version}

    def __init__(self, context):
        self.context = context
        self.hp = context.get_hparam("{hparam}")
        self.model = context.wrap_model(torch.nn.Linear(1, 1, bias=False).double())
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def build_training_data_loader(self):
        raise NotImplementedError

    def build_validation_data_loader(self):
        raise NotImplementedError

    def train_batch(self, batch, epoch_idx, batch_idx):
        raise NotImplementedError

    def evaluate_batch(self, batch):
        raise NotImplementedError
'''

# Determined's pre-0.12.13 PyTorchTrial: build_model() / optimizer(model) / train_batch(batch, model, ...).
OLD = '''
import torch
from determined import pytorch


class OldTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context

    def build_model(self):
        return torch.nn.Sequential(torch.nn.Linear(2, 1, bias=False).double())

    def optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def build_training_data_loader(self):
        raise NotImplementedError

    def build_validation_data_loader(self):
        raise NotImplementedError

    def train_batch(self, batch, model, epoch_idx, batch_idx):
        raise NotImplementedError

    def evaluate_batch(self, batch, model):
        raise NotImplementedError
'''


def _checkpoint(root: str, name: str, version: int, hparam: str, weight: float) -> str:
    return write_current(
        os.path.join(root, name),
        weights=[{"weight": torch.tensor([[weight]], dtype=torch.float64)}],
        optimizers=[sgd_state(0.1)],
        trial_cls_spec="model_def:Trial",
        hparams={hparam: version, "global_batch_size": 1},
        code={"model_def.py": CURRENT.format(version=version, hparam=hparam)},
    )


def test_each_trusted_load_imports_its_own_checkpoint_code(tmp_path: Any) -> None:
    first = _checkpoint(str(tmp_path), "one", 1, "a", 0.5)
    second = _checkpoint(str(tmp_path), "two", 2, "b", -3.0)
    install_alias()  # the one sys.path entry a load may add: `import determined` for the code
    callers = types.ModuleType("model_def")  # the caller's own model_def, imported before
    sys.modules["model_def"] = callers
    path_before = list(sys.path)
    try:
        t1 = pytorch.load_trial_from_checkpoint_path(first, trust=True)
        t2 = pytorch.load_trial_from_checkpoint_path(second, trust=True)
        again = pytorch.load_trial_from_checkpoint_path(first, trust=True)
        assert (type(t1).VERSION, t1.hp, t1.model.weight.item()) == (1, 1, 0.5)
        assert (type(t2).VERSION, t2.hp, t2.model.weight.item()) == (2, 2, -3.0)
        assert type(again).VERSION == 1 and type(again) is not type(t1)  # imported afresh
        assert sys.path == path_before
        assert sys.modules["model_def"] is callers
        assert not any(os.path.join(str(tmp_path), "") in str(getattr(m, "__file__", ""))
                       for m in list(sys.modules.values()))
        assert not os.path.exists(os.path.join(first, "code", "__pycache__"))
    finally:
        del sys.modules["model_def"]


def test_a_pre_0_12_13_checkpoint_loads_as_its_build_model_module(tmp_path: Any) -> None:
    weights = {"0.weight": torch.tensor([[0.25, -1.5]], dtype=torch.float64)}
    path = write_legacy(
        os.path.join(str(tmp_path), "old"),
        weights=weights,
        optimizer=sgd_state(0.1),
        entrypoint="model_def:OldTrial",
        hparams={"global_batch_size": 4},
        steps_completed=10,
        code={"model_def.py": OLD},
    )
    model = pytorch.load_trial_from_checkpoint_path(path, trust=True)
    assert isinstance(model, torch.nn.Sequential)
    assert model[0].weight.tolist() == [[0.25, -1.5]]
    assert "model_def" not in sys.modules
