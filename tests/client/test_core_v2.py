"""``determined.experimental.core_v2``'s own rules (``determined_lite.client._core_v2``), as
Determined 0.38.1's ``_core_v2.py`` has them: the singletons ``init`` fills and ``close`` clears,
the deprecated ``defaults`` / ``unmanaged`` configs, the ``checkpoint_storage`` shortcuts."""

from __future__ import annotations

import os
from typing import Any

import pytest

from determined_lite.client import _core_v2 as core_v2
from determined_lite.store import Store


def test_init_fills_the_singletons_and_close_clears_train_only(_det_lite_home: Any) -> None:
    core_v2.init(config=core_v2.Config(name="first"))
    try:
        assert core_v2.info.trial.experiment_id == 1 and core_v2.info._trial_info is core_v2.info.trial
        assert core_v2.url_reverse_webui_exp_view() == "#/experiments/1"
        core_v2.train.report_training_metrics(steps_completed=3, metrics={"loss": 0.5})
        core_v2.init(config=core_v2.Config(name="second"))  # closes the first context
        store = Store()
        assert [(e["name"], e["state"]) for e in store.experiments.list()] == [
            ("first", "COMPLETED"),
            ("second", "ACTIVE"),
        ]
        assert core_v2.info.trial.experiment_id == 2
    finally:
        core_v2.close()
    assert core_v2.train is None and core_v2.checkpoint is not None  # Determined clears train only
    assert store.experiments.get(2)["state"] == "COMPLETED"
    core_v2.close()  # closing again does nothing
    assert store.experiments.get(2)["state"] == "COMPLETED"


def test_without_a_config_outside_a_trial_it_says_what_is_missing(_det_lite_home: Any) -> None:
    with pytest.raises(ValueError, match="either specify `defaults` or `config`"):
        core_v2.init_context()


def test_the_deprecated_defaults_and_unmanaged_configs_are_merged(_det_lite_home: Any) -> None:
    with pytest.warns(FutureWarning, match="'DefaultConfig' class have been deprecated"):
        defaults = core_v2.DefaultConfig(name="merged")
    with pytest.warns(FutureWarning, match="'UnmanagedConfig' class have been deprecated"):
        unmanaged = core_v2.UnmanagedConfig(external_experiment_id="ext-1")
    with pytest.warns(FutureWarning, match="'defaults' and 'unmanaged' parameters have been deprecated"):
        with core_v2.init_context(defaults=defaults, unmanaged=unmanaged):
            pass
    (exp,) = Store().experiments.list()
    assert (exp["name"], exp["config"]["external_experiment_id"]) == ("merged", "ext-1")


def test_checkpoint_storage_shortcuts(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert core_v2.storage_config("/data/ckpts") == {"type": "directory", "container_path": "/data/ckpts"}
    assert core_v2.storage_config("file:///data/c") == {"type": "directory", "container_path": "/data/c"}
    assert core_v2.storage_config("rel/c") == {
        "type": "directory",
        "container_path": os.path.join(str(tmp_path), "rel", "c"),
    }
    assert core_v2.storage_config("s3://bkt/a/b") == {"type": "s3", "bucket": "bkt", "prefix": "a/b"}
    assert core_v2.storage_config("gs://bkt/p") == {"type": "gcs", "bucket": "bkt", "prefix": "p"}
    with pytest.raises(ValueError, match='Malformed checkpoint_storage string "/a\\?b=1"'):
        core_v2.storage_config("/a?b=1")
    with pytest.raises(NotImplementedError):
        core_v2.storage_config("hdfs://x/y")
