"""Determined's current searcher length: ``time_metric`` + ``max_time``, beside ``max_length``.

Determined >= 0.38 configures ``searcher.time_metric`` (a reported validation metric, or
``batches``) and ``searcher.max_time`` instead of the deprecated ``max_length``.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from determined_lite.config import Batch, ConfigError, Epoch
from determined_lite.searcher import validate_config

SCRIPT = "python3 train.py"


def config(searcher: Dict[str, Any], entrypoint: str = SCRIPT) -> Dict[str, Any]:
    return {"entrypoint": entrypoint, "hyperparameters": {"global_batch_size": 2}, "searcher": searcher}


ASHA = {"name": "adaptive_asha", "metric": "val_loss", "max_trials": 4}


@pytest.mark.parametrize(
    "time_metric, unit, time, length",
    [
        ("batches", "batches", None, Batch(16)),
        ("epochs", "epochs", None, Epoch(16)),
        ("seen", "batches", "seen", None),
    ],
)
def test_time_metric_and_max_time_are_a_length(time_metric, unit, time, length):
    conf = validate_config(config(dict(ASHA, time_metric=time_metric, max_time=16)))
    settings = conf.searcher_settings()
    assert (settings.unit, settings.max_length, settings.time_metric) == (unit, 16, time)
    assert conf.training_settings().max_length == length
    stored = conf.to_dict()
    assert "max_length" not in stored["searcher"] and stored["searcher"]["max_time"] == 16
    assert validate_config(stored).to_dict() == stored


@pytest.mark.parametrize(
    "searcher, path, words",
    [
        (dict(ASHA, time_metric="batches"), "searcher.max_time", "the searcher needs a length"),
        (dict(ASHA, max_time=4), "searcher.time_metric", "the searcher needs a length"),
        (dict(ASHA), "searcher.max_length", "the searcher needs a length"),
        (
            dict(ASHA, max_time=4, time_metric="batches", max_length={"batches": 4}),
            "searcher.max_time",
            "not both",
        ),
        (dict(ASHA, max_time=0, time_metric="batches"), "searcher.max_time", ""),
    ],
)
def test_incomplete_or_doubled_lengths_are_one_line_errors(searcher, path, words):
    with pytest.raises(ConfigError) as e:
        validate_config(config(searcher), "const.yaml")
    assert e.value.path == path and words in e.value.message, str(e.value)


def test_a_metric_of_its_own_needs_a_script():
    with pytest.raises(ConfigError) as e:
        validate_config(config(dict(ASHA, time_metric="seen", max_time=8), entrypoint="m:T"), "const.yaml")
    assert e.value.path == "searcher.time_metric"
    assert "a time metric of your own needs a script that reports it" in e.value.message


def test_a_script_may_train_to_its_own_length_without_rungs():
    """Determined >= 0.38: ``single``/``grid``/``random`` need no length; the script sets it."""
    conf = validate_config(config({"name": "single", "metric": "val_loss"}))
    assert conf.searcher_settings().max_length == 0  # OWN_LENGTH: the script's own
    assert conf.training_settings().max_length is None
    stored = conf.to_dict()
    assert validate_config(stored).to_dict() == stored
    for searcher, entrypoint in [
        ({"name": "single", "metric": "val_loss"}, "m:T"),  # a class trains to the searcher's length
        (dict(ASHA), SCRIPT),  # rungs need a length
    ]:
        with pytest.raises(ConfigError) as e:
            validate_config(config(searcher, entrypoint=entrypoint))
        assert e.value.path == "searcher.max_length" and "the searcher needs a length" in e.value.message
