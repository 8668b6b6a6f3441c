"""End-to-end: the flagship experiment (experiment.yaml, examples/digits) trains to >= 95 %."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="examples need scikit-learn (pip install -e '.[test]')")

from determined_lite.store import Store  # noqa: E402
from examples.digits import train  # noqa: E402
from examples.digits.model_def import load_splits  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENT = REPO_ROOT / "experiment.yaml"


def test_split_is_deterministic_and_stratified() -> None:
    train_ds, val_ds = load_splits()
    assert (len(train_ds), len(val_ds)) == (1437, 360)
    conf = train.load_config(str(EXPERIMENT))
    assert conf["records_per_epoch"] == len(train_ds)
    x, y = val_ds.tensors
    assert x.dtype.is_floating_point and float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert np.bincount(y.numpy(), minlength=10).min() >= 35  # every class present


def test_digits_experiment_reaches_95_percent(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DET_LITE_HOME", str(tmp_path))
    conf = train.load_config(str(EXPERIMENT))
    epochs = conf["searcher"]["max_length"]["epochs"]

    result = train.run(str(EXPERIMENT))
    validations = result.validations

    # min_validation_period: {epochs: 1} -> one validation per epoch
    assert len(validations) == epochs
    final = validations[-1]
    json.dumps(final)  # metrics are JSON-serializable
    assert final["accuracy"] >= 0.95, final

    matrix = np.asarray(final["confusion_matrix"])
    _, val_ds = load_splits()
    assert matrix.shape == (10, 10)
    assert matrix.sum() == len(val_ds) == 360  # every validation record counted exactly once
    assert np.array_equal(matrix.sum(axis=1), np.bincount(val_ds.tensors[1].numpy(), minlength=10))
    # the sample-weighted AVG accuracy and the reducer's matrix agree
    assert final["accuracy"] == pytest.approx(np.trace(matrix) / matrix.sum(), abs=1e-6)
    assert 0.95 <= final["balanced_accuracy"] <= 1.0

    # checkpoints land under $DET_LITE_HOME/checkpoints/<uuid>/; the run is recorded as a local
    # experiment whose retention policy (Determined's default) keeps the best and the latest
    assert result.checkpoint_dirs
    assert {pathlib.Path(p).parent for p in result.checkpoint_dirs} == {tmp_path / "checkpoints"}
    kept = Store().checkpoints.list()
    assert [c["path"] for c in kept] == [p for p in result.checkpoint_dirs if p in {c["path"] for c in kept}]
    best = max(kept, key=lambda c: c["metrics"]["accuracy"])
    assert best["metrics"]["accuracy"] == max(v["accuracy"] for v in validations if "accuracy" in v)
    assert kept[-1]["path"] == result.checkpoint_dirs[-1] and len(kept) <= 2
    for path in result.checkpoint_dirs:
        ckpt = pathlib.Path(path)
        on_disk = (ckpt / "state_dict.pth").is_file() and (ckpt / "metadata.json").is_file()
        assert on_disk == (path in {c["path"] for c in kept})
