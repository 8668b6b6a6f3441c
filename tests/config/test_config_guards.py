"""Config input that used to be accepted and fail every trial, or hang the CLI, is refused at
validation with one line naming the file and the field (issue: fail fast, never hang)."""

from __future__ import annotations

import os
import time

import pytest

from determined_lite.config import ConfigError
from determined_lite.searcher import load_config, validate_config
from tests.cli_helpers import cli
from tests.cli_helpers import write_config as _write_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")

BASE = {
    "entrypoint": "model_def:Trial",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    "hyperparameters": {"global_batch_size": 8},
}


def error_of(**sections: object) -> str:
    config = {**BASE, **sections}
    with pytest.raises(ConfigError) as info:
        validate_config(config, "exp.yaml")
    return str(info.value)


def test_misspelled_type_of_a_search_spec_is_an_error_with_a_suggestion() -> None:
    # Before: a constant dict {"tpye": "log", ...} reached every trial as the learning rate.
    space = {"global_batch_size": 8, "lr": {"tpye": "log", "minval": -4, "maxval": -1, "base": 10}}
    message = error_of(hyperparameters=space)
    assert message.startswith("exp.yaml: hyperparameters.lr.tpye: unknown key 'tpye'; did you mean 'type'?")


def test_search_spec_keys_without_a_type_are_an_error() -> None:
    message = error_of(hyperparameters={"global_batch_size": 8, "lr": {"minval": 0.1, "maxval": 1.0}})
    assert message.startswith("exp.yaml: hyperparameters.lr: has minval, maxval but no 'type'")


def test_groups_whose_members_merely_resemble_spec_words_stay_groups() -> None:
    space = {"global_batch_size": 8, "layer": {"types": ["conv", "pool"], "base": 64, "count": 3}}
    config = validate_config({**BASE, "hyperparameters": space}, "exp.yaml")
    assert config.to_dict()["hyperparameters"]["layer"] == {
        "types": {"type": "const", "val": ["conv", "pool"]},
        "base": {"type": "const", "val": 64},
        "count": {"type": "const", "val": 3},
    }


def test_a_float_too_large_for_yaml_reads_as_inf_and_is_refused(tmp_path) -> None:
    path = _write_config(os.path.join(LINEAR, "const.yaml"), tmp_path)
    with open(path, "a") as f:
        f.write("records_per_epoch: 8\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["hyperparameters.lr=1e400"])
    assert str(info.value) == (
        f"{path}: hyperparameters.lr: expected a finite number, got inf (YAML reads .inf, .nan and "
        "numbers beyond 1.8e308, such as 1e400, as non-finite)"
    )


def test_infinite_divisor_and_huge_lengths_are_refused() -> None:
    asha = {"name": "adaptive_asha", "metric": "loss", "max_length": {"batches": 8}, "max_trials": 4}
    assert error_of(searcher={**asha, "divisor": float("inf")}).startswith(
        "exp.yaml: searcher.divisor: expected a finite number, got inf"
    )
    huge = {"name": "single", "metric": "loss", "max_length": {"batches": 10**30}}
    assert error_of(searcher=huge) == (
        "exp.yaml: searcher.max_length.batches: expected an integer below 2**63, "
        "got 1000000000000000000000000000000"
    )


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):  # 9**10 values once expanded
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nhyperparameters:\n  big: *a9\n")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"expands to more than 100000 values through its aliases"):
        load_config(str(path))
    assert time.monotonic() - start < 30  # a generous bound: expanding it would take hours


@pytest.mark.slow
def test_a_fifo_as_the_config_file_exits_2_without_waiting(tmp_path) -> None:
    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)
    proc = cli("experiment", "create", str(fifo), LINEAR, timeout=60)  # opening it would block
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"det-lite: error: {fifo}: not a regular file; expected an experiment config (YAML) file"
    ]
    from determined_lite.store import Store

    assert Store().experiments.count() == 0


def test_horovod_missing_for_two_slots_exits_2_before_recording(tmp_path, monkeypatch, capsys) -> None:
    from determined_lite.experiment import create_experiment
    from determined_lite.launch import _horovodrun
    from determined_lite.store import Store

    monkeypatch.setattr(_horovodrun, "horovod_installed", lambda: False)
    path = _write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **{"resources.slots_per_trial": 2, "resources.distributed_backend": "horovod"},
    )
    assert create_experiment(path, LINEAR) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"det-lite: error: {path}: {_horovodrun.HOROVOD_MISSING}"]
    assert Store().experiments.count() == 0  # nothing left ACTIVE behind
