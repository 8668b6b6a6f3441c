"""Legacy callback signatures (issue 12, item 8).

Determined (``_PyTorchTrialController._on_epoch_start``): an ``on_training_epoch_start(self)``
without ``epoch_idx`` is still called, without arguments, after the warning
"on_training_epoch_start() without parameters is deprecated since 0.17.8"; an overridden
``on_checkpoint_end`` warns with a ``FutureWarning``. det-lite also accepts
``on_validation_epoch_end(self)`` without ``outputs`` (Determined raises TypeError there).
Before, det-lite called every hook with its arguments, so these raised TypeError.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, List

import pytest

from determined_lite import pytorch
from determined_lite.pytorch._callback import CallbackDeprecationWarning
from tests.pytorch.test_callbacks import _fit


class Legacy(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.epoch_starts = 0
        self.validation_epoch_ends = 0

    def on_training_epoch_start(self) -> None:  # type: ignore[override]
        self.epoch_starts += 1

    def on_validation_epoch_end(self) -> None:  # type: ignore[override]
        self.validation_epoch_ends += 1


class Current(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.epochs: List[int] = []
        self.outputs: List[Any] = []

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.epochs.append(epoch_idx)

    def on_validation_epoch_end(self, outputs: List[Any]) -> None:
        self.outputs.append(outputs)


def test_legacy_forms_run_without_arguments_with_one_warning_each(caplog: pytest.LogCaptureFixture) -> None:
    legacy, current = Legacy(), Current()
    caplog.set_level(logging.WARNING, logger="determined_lite")
    with pytest.warns(CallbackDeprecationWarning) as record:
        _fit({"legacy": legacy, "current": current}, max_batches=8, validation=4)
    assert current.epochs and len(current.outputs) == 2
    assert legacy.epoch_starts == len(current.epochs)  # every epoch, like the current form
    assert legacy.validation_epoch_ends == len(current.outputs)
    messages = [str(w.message) for w in record if issubclass(w.category, CallbackDeprecationWarning)]
    assert messages == [
        "callback 'legacy' defines on_training_epoch_start() without parameters, which is "
        "deprecated; define on_training_epoch_start(self, epoch_idx)",
        "callback 'legacy' defines on_validation_epoch_end() without parameters, which is "
        "deprecated; define on_validation_epoch_end(self, outputs)",
    ]
    assert sum("without parameters, which is deprecated" in r.getMessage() for r in caplog.records) == 2


def test_deprecation_warnings_are_future_and_deprecation_warnings() -> None:
    # Determined warns about on_checkpoint_end with a FutureWarning; det-lite's tests and users
    # that filter DeprecationWarning keep working too.
    class Old(pytorch.PyTorchCallback):
        def on_checkpoint_end(self, checkpoint_dir: str) -> None:
            pass

    with pytest.warns(FutureWarning, match="on_checkpoint_end"):
        _fit({"old": Old()}, max_batches=2, validation=None, checkpoint_period=2)
    assert issubclass(CallbackDeprecationWarning, DeprecationWarning)


def test_current_forms_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CallbackDeprecationWarning)
        _fit({"current": Current()}, max_batches=4, validation=4)
