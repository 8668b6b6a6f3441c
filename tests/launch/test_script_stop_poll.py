"""A script's pause/kill poll on a non-chief rank (``should_preempt`` in ``WorkersAskMaster``
mode): under a remote executor it reads the stop flag the driver puts on its node and never
opens the store; without one it asks the store, as before."""

from __future__ import annotations

import types

from determined_lite.launch._script import ScriptTrial
from determined_lite.reporting._sink import STOP_FILE_ENV
from determined_lite.runtime._spec import WorkerSpec
from determined_lite.store import Action, Store


def _trial(tmp_path, store_path: str) -> ScriptTrial:
    spec = WorkerSpec(
        entrypoint="train.py",
        context_dir=str(tmp_path),
        exp_conf={},
        hparams={},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 1},
        trial_seed=0,
        settings={},
        trial_id=1,
        experiment_id=1,
        store_path=store_path,
    )
    return ScriptTrial(spec, types.SimpleNamespace(is_chief=False), [])


def test_a_remote_rank_reads_its_nodes_flag_not_the_store(tmp_path, monkeypatch):
    store_path = tmp_path / "elsewhere" / "det-lite.db"  # the driver's: not on this node
    monkeypatch.setenv(STOP_FILE_ENV, str(tmp_path / "stop"))
    trial = _trial(tmp_path, str(store_path))
    assert trial.stop_requested() is False
    (tmp_path / "stop").touch()
    assert trial.stop_requested() is True
    assert not store_path.parent.exists()  # the store was never opened


def test_a_local_rank_asks_the_store(tmp_path, monkeypatch):
    monkeypatch.delenv(STOP_FILE_ENV, raising=False)
    store = Store(str(tmp_path / "det-lite.db"))
    exp = store.experiments.create({"name": "x"}, None, None)
    trial = _trial(tmp_path, str(tmp_path / "det-lite.db"))
    assert trial.stop_requested() is False
    store.requests.request(exp, Action.PAUSE)
    assert trial.stop_requested() is True
