"""``det_lite.callback_modules`` from plain Python: ``Trainer.fit`` imports the modules (their
import registers global callbacks); errors name the field."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Iterator

import pytest

from determined_lite import pytorch
from determined_lite.pytorch._callback import global_callbacks
from tests.fixtures.cb_trial import fit_cb_trial

MODULE = '''
from determined_lite import pytorch


class CountBatches(pytorch.PyTorchCallback):
    def __init__(self):
        self.batches = 0

    def on_train_batch_end(self, metrics, batch_idx):
        self.batches += 1


COUNTER = CountBatches()
HANDLE = pytorch.register_global_callback(COUNTER)
'''


def modules(*names: str) -> dict:
    return {"det_lite": {"callback_modules": list(names)}}


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path (conftest restores sys.path and forgets its modules)."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path


def test_fit_imports_the_named_modules_and_their_callbacks_run(module_dir: Path) -> None:
    (module_dir / "cb_module_a.py").write_text(MODULE)
    before = global_callbacks()
    try:
        fit_cb_trial(max_batches=3, validation=None, exp_conf=modules("cb_module_a"))
        module = sys.modules["cb_module_a"]
        assert module.COUNTER.batches == 3
        assert global_callbacks() == before + [module.COUNTER]
        # Imported once per process: a second fit does not register it again.
        fit_cb_trial(max_batches=2, validation=None, exp_conf=modules("cb_module_a"))
        assert module.COUNTER.batches == 5 and len(global_callbacks()) == len(before) + 1
    finally:
        if "cb_module_a" in sys.modules:
            sys.modules["cb_module_a"].HANDLE.remove()


def test_a_missing_module_names_the_field() -> None:
    with pytest.raises(ImportError, match=r"det_lite.callback_modules: cannot import 'no_such_cb_module'"):
        fit_cb_trial(max_batches=1, exp_conf=modules("no_such_cb_module"))


def test_a_module_that_registers_nothing_is_reported(
    module_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (module_dir / "cb_module_empty.py").write_text("X = 1\n")
    with caplog.at_level(logging.WARNING, logger="determined_lite"):
        fit_cb_trial(max_batches=1, validation=None, exp_conf=modules("cb_module_empty"))
    assert any("'cb_module_empty' registered no callback" in r.getMessage() for r in caplog.records)


def test_callbacks_registered_in_the_module_are_the_last_to_run(module_dir: Path) -> None:
    (module_dir / "cb_module_b.py").write_text(MODULE)
    order: list = []

    class Mine(pytorch.PyTorchCallback):
        def on_train_batch_end(self, metrics: object, batch_idx: int) -> None:
            order.append(("mine", sys.modules["cb_module_b"].COUNTER.batches))

    try:
        fit_cb_trial(
            max_batches=2,
            validation=None,
            trainer_callbacks=[Mine()],
            exp_conf=modules("cb_module_b"),
        )
    finally:
        if "cb_module_b" in sys.modules:
            sys.modules["cb_module_b"].HANDLE.remove()
    assert order == [("mine", 0), ("mine", 1)]  # the global counter ran after "mine" each batch
