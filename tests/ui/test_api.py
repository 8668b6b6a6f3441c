"""det-lite ui's HTTP API without a browser: the token, the JSON documents, the actions, the
read-only store. The experiments here are written straight into the store (no training)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, Optional

import pytest

from determined_lite.store import ExperimentState, Store
from determined_lite.ui import TOKEN_HEADER, DashboardServer
from determined_lite.ui._searcher import progress, rungs

CONFIG = {
    "name": "api-demo",
    "hyperparameters": {
        "lr": {"type": "categorical", "vals": [0.1, 0.2]},
        "width": {"type": "const", "val": 4},
    },
    "searcher": {"name": "grid", "metric": "val_loss", "max_length": {"batches": 10}},
}


@pytest.fixture
def server(_det_lite_home):
    store = Store()
    exp = store.experiments.create(CONFIG, None, None)
    for request_id, lr in enumerate((0.1, 0.2)):
        trial = store.trials.create(exp, request_id, {"lr": lr, "width": 4}, 0)
        for batch in range(1, 11):
            store.metrics.add_training(trial, batch, {"loss": lr * batch})
            store.metrics.add_validation(trial, batch, {"val_loss": lr / batch})
        store.trials.update(trial, best_validation=lr / 10, state="COMPLETED", stopped_early=lr == 0.2)
        store.logs.add(trial, [f"trial {trial} says hello", f"lr is {lr}"])
    store.experiments.set_state(exp, ExperimentState.COMPLETED)
    store.experiments.create({**CONFIG, "name": "other"}, None, None, state=ExperimentState.PAUSED)
    srv = DashboardServer("127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _base(srv: DashboardServer) -> str:
    return srv.url().split("/?")[0]


def _call(srv, path: str, method: str = "GET", headers: Optional[Dict[str, str]] = None) -> Any:
    request = urllib.request.Request(_base(srv) + path, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _get(srv, path: str) -> Any:
    return _call(srv, path, headers={TOKEN_HEADER: srv.token})


def _status(srv, path: str, method: str = "GET", headers: Optional[Dict[str, str]] = None) -> int:
    try:
        request = urllib.request.Request(_base(srv) + path, method=method, headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_every_api_request_needs_the_token(server):
    paths = ("/api/experiments", "/api/experiments/1", "/api/trials/1", "/api/curves?trials=1&metric=loss")
    for path in paths:
        assert _status(server, path) == 403
        assert _status(server, path, headers={TOKEN_HEADER: "wrong"}) == 403
        assert _status(server, path, headers={TOKEN_HEADER: server.token}) == 200
    assert _status(server, f"/api/experiments?token={server.token}") == 200
    # Changing something: POST with the header; the URL's token is not enough.
    assert _status(server, f"/api/experiments/2/kill?token={server.token}", "POST") == 403
    assert _status(server, "/api/experiments/2/kill", "GET", headers={TOKEN_HEADER: server.token}) == 404
    assert Store().experiments.get(2)["state"] == "PAUSED"
    assert server.server_address[0] == "127.0.0.1"
    assert server.queries.store.read_only


def test_experiments_list_and_filters(server):
    rows = _get(server, "/api/experiments")["experiments"]
    assert [r["id"] for r in rows] == [2, 1]  # newest first
    done = rows[1]
    assert done["name"] == "api-demo" and done["state"] == "COMPLETED" and done["num_trials"] == 2
    assert done["best_metric"] == pytest.approx(0.01) and done["metric"] == "val_loss"
    assert done["display_state"] == "COMPLETED" and done["actions"] == []  # nothing to press
    assert rows[0]["display_state"] == "PAUSED" and rows[0]["actions"] == ["activate", "kill"]
    assert [r["id"] for r in _get(server, "/api/experiments?state=PAUSED")["experiments"]] == [2]
    assert [r["id"] for r in _get(server, "/api/experiments?name=API")["experiments"]] == [1]


def test_experiment_document(server):
    doc = _get(server, "/api/experiments/1")
    assert doc["experiment"]["name"] == "api-demo"
    assert doc["varying"] == ["lr"]
    assert [t["varying"] for t in doc["trials"]] == [{"lr": 0.1}, {"lr": 0.2}]
    # The CLI's words: the trial the searcher closed early is ASHA-stopped, not COMPLETED.
    assert [t["display_state"] for t in doc["trials"]] == ["COMPLETED", "ASHA-stopped"]
    assert doc["experiment"]["actions"] == []
    assert doc["metrics"] == {"training": ["loss"], "validation": ["val_loss"]}
    assert "metric: val_loss" in doc["config_yaml"]
    assert doc["rungs"] is None  # grid
    assert _status(server, "/api/experiments/99", headers={TOKEN_HEADER: server.token}) == 404


def test_curves_one_series_per_trial(server):
    doc = _get(server, "/api/experiments/1/curves?kind=validation&metric=val_loss")
    assert [s["trial_id"] for s in doc["series"]] == [1, 2]
    assert doc["series"][1]["x"] == list(range(1, 11))
    assert doc["series"][1]["y"] == pytest.approx([0.2 / b for b in range(1, 11)])
    assert _get(server, "/api/trials/2/curves?kind=training&metric=loss&points=5")["series"][0]["rows"] == 10
    assert (
        _status(server, "/api/trials/2/curves?kind=bogus&metric=x", headers={TOKEN_HEADER: server.token})
        == 400
    )


def test_logs_tail_and_search(server):
    lines = _get(server, "/api/experiments/1/logs?tail=1")["lines"]
    assert [line["line"] for line in lines] == ["lr is 0.2"]
    found = _get(server, "/api/trials/1/logs?q=HELLO")
    assert [line["line"] for line in found["lines"]] == ["trial 1 says hello"] and found["matches"] == 1


def test_actions_use_the_cli_rules(server):
    headers = {TOKEN_HEADER: server.token}
    done = _call(server, "/api/experiments/2/kill", "POST", headers)
    assert done["state"] == "CANCELED"
    assert done["messages"] == ["Experiment 2 had no running process; it is now CANCELED."]
    assert Store().experiments.get(2)["state"] == "CANCELED"
    again = _call(server, "/api/experiments/1/pause", "POST", headers)
    assert again["messages"] == ["Experiment 1 is already COMPLETED; nothing to do."]
    assert _status(server, "/api/experiments/1/activate", "POST", headers) == 409  # only PAUSED resumes
    assert _status(server, "/api/experiments/42/kill", "POST", headers) == 404


def test_asha_rungs_and_progress_from_the_saved_searcher():
    from determined_lite.searcher import make_searcher

    config = {
        "searcher": {
            "name": "adaptive_asha",
            "metric": "acc",
            "smaller_is_better": False,
            "max_trials": 4,
            "max_length": {"batches": 8},
            "divisor": 2,
            "max_rungs": 2,
            "mode": "aggressive",
        },
        "hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
    }
    searcher = make_searcher(config["searcher"], config["hyperparameters"], 0)
    creates = [op for op in searcher.initial_operations() if type(op).__name__ == "Create"]
    first = creates[0].request_id
    searcher.on_validation_completed(first, 0.9, 4)
    saved = {"searcher": searcher.state_dict()}
    found = rungs(saved, {str(first): 11}, smaller_is_better=False)
    assert found is not None and [r["rung"] for r in found] == [0, 1]
    assert found[0]["trials"][0]["trial_id"] == 11 and found[0]["trials"][0]["metric"] == pytest.approx(0.9)
    assert 0 < progress(config, saved) < 1
    assert rungs({"searcher": {"searcher": "grid"}}, {}, True) is None
    assert progress(config, None) is None and progress({"searcher": "nonsense"}, saved) is None


@pytest.mark.parametrize(
    "row, buttons",
    [
        ({"state": "COMPLETED"}, []),
        ({"state": "CANCELED"}, []),
        ({"state": "PAUSED", "kind": "experiment"}, ["activate", "kill"]),
        ({"state": "PAUSED", "kind": "local"}, ["kill"]),
        ({"state": "ACTIVE", "running": True}, ["pause", "kill"]),
        ({"state": "ACTIVE", "running": True, "requested_action": "pause"}, ["activate", "kill"]),
        ({"state": "ACTIVE", "running": True, "requested_action": "kill"}, []),
        ({"state": "ACTIVE", "running": False, "pid": 7}, ["activate", "kill"]),
    ],
)
def test_only_the_actions_that_apply(row, buttons):
    from determined_lite.ui._actions import available_actions

    assert available_actions(row) == buttons


def test_compare_puts_trials_side_by_side(server):
    doc = _get(server, "/api/compare?trials=2,1")
    assert [t["trial"]["id"] for t in doc["trials"]] == [2, 1]
    assert doc["hparams"] == ["lr", "width"]
    # The best validation (val_loss smallest: lr / 10 at batch 10) with all its metrics.
    assert [t["best"]["total_batches"] for t in doc["trials"]] == [10, 10]
    assert doc["trials"][0]["best"]["metrics"] == {"val_loss": pytest.approx(0.02)}
    assert doc["trials"][0]["metric"] == "val_loss" and doc["trials"][0]["smaller_is_better"] is True
    many = ",".join(["1"] * 21)
    assert _status(server, f"/api/compare?trials={many}", headers={TOKEN_HEADER: server.token}) == 400


def test_checkpoint_download_is_an_archive_of_its_files_only(server, tmp_path):
    import io
    import os
    import tarfile

    directory = tmp_path / "ck"
    (directory / "sub").mkdir(parents=True)
    (directory / "state_dict.pth").write_bytes(b"weights")
    (directory / "sub" / "meta.json").write_text('{"a": 1}')
    secret = tmp_path / "secret.txt"
    secret.write_text("not in the checkpoint")
    os.symlink(secret, directory / "escape.txt")  # a link out of the checkpoint is left out
    os.symlink(tmp_path, directory / "sub" / "up")
    uuid = "0123abcd-0000-4000-8000-000000000001"
    Store().checkpoints.add(1, uuid, str(directory), 10, {"val_loss": 0.01})
    request = urllib.request.Request(f"{_base(server)}/api/checkpoints/{uuid}/download?token={server.token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Disposition"] == f'attachment; filename="{uuid}.tar.gz"'
        body = response.read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert sorted(members) == [f"{uuid}/state_dict.pth", f"{uuid}/sub/meta.json"]
        assert all(m.isfile() for m in members.values())
        assert archive.extractfile(f"{uuid}/state_dict.pth").read() == b"weights"
    headers = {TOKEN_HEADER: server.token}
    assert _status(server, "/api/checkpoints/ffff/download", headers=headers) == 404
    assert _status(server, f"/api/checkpoints/{uuid}/download") == 403


def _post_json(srv, path: str, body: bytes) -> Any:
    headers = {TOKEN_HEADER: srv.token, "Content-Type": "application/json"}
    request = urllib.request.Request(_base(srv) + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_labels_and_notes_are_saved_and_checked(server):
    body = json.dumps({"labels": ["b", " a ", "", "b"], "notes": "lr 0.1 was better"}).encode()
    assert _post_json(server, "/api/experiments/1/annotations", body) == (
        200,
        {"experiment_id": 1, "labels": ["a", "b"], "notes": "lr 0.1 was better"},
    )
    assert Store().experiments.annotations(1) == {"labels": ["a", "b"], "notes": "lr 0.1 was better"}
    doc = _get(server, "/api/experiments/1")["experiment"]
    assert (doc["labels"], doc["notes"]) == (["a", "b"], "lr 0.1 was better")
    assert _post_json(server, "/api/experiments/1/annotations", b'{"labels": "a"}') == (
        400,
        {"error": "labels must be a list of text"},
    )
    assert _post_json(server, "/api/experiments/1/annotations", b"not json")[0] == 400
    assert _post_json(server, "/api/experiments/9/annotations", b'{"notes": "x"}')[0] == 404
    assert Store().experiments.annotations(1)["notes"] == "lr 0.1 was better"  # refused ones change nothing


def test_model_registry(server):
    assert _get(server, "/api/models") == {"models": []}
    store = Store()
    store.checkpoints.add(2, "ck-2", "/nowhere/ck-2", 10, {"val_loss": 0.02})
    store.models.create("regressor", description="y = 2x")
    store.models.add_version("regressor", "ck-2")
    [model] = _get(server, "/api/models")["models"]
    assert (model["name"], model["description"], model["num_versions"]) == ("regressor", "y = 2x", 1)
    [version] = model["versions"]
    assert version["version"] == 1 and version["checkpoint_uuid"] == "ck-2"
    assert version["checkpoint"] == {
        "trial_id": 2,
        "experiment_id": 1,
        "total_batches": 10,
        "metrics": {"val_loss": 0.02},
    }


def test_where_each_trial_runs_is_what_the_store_recorded(server):
    doc = _get(server, "/api/experiments/1")
    assert [t["where"] for t in doc["trials"]] == ["-", "-"]  # never ran: nothing recorded
    store = Store()
    store.trials.add_run(1, executor="local", host="box", slots=1)
    store.trials.add_run(2, executor="local", host="box", slots=1)
    store.trials.add_run(2, executor="ray", host="node-b", slots=2, devices=["0", "1"])  # a restart
    doc = _get(server, "/api/experiments/1")
    assert [t["where"] for t in doc["trials"]] == ["box (local, 1 slot)", "node-b (ray, 2 slots, gpu 0,1)"]
    assert [r["host"] for r in doc["trials"][1]["runs"]] == ["box", "node-b"]
    assert _get(server, "/api/trials/2")["trial"]["where"] == "node-b (ray, 2 slots, gpu 0,1)"


def test_kill_one_trial_as_the_cli(server):
    store = Store()
    trial = store.trials.create(2, 0, {"lr": 0.1, "width": 4}, 0)  # in the PAUSED experiment
    assert _get(server, f"/api/trials/{trial}")["trial"]["actions"] == ["kill"]
    headers = {TOKEN_HEADER: server.token}
    done = _call(server, f"/api/trials/{trial}/kill", "POST", headers)
    assert done == {"trial_id": trial, "state": "CANCELED", "messages": [f"Killed trial {trial}"]}
    assert store.trials.get(trial)["state"] == "CANCELED"
    assert _get(server, f"/api/trials/{trial}")["trial"]["actions"] == []
    again = _call(server, "/api/trials/1/kill", "POST", headers)
    assert again["messages"] == ["Trial 1 already ended (COMPLETED); nothing to kill."]
    assert _status(server, "/api/trials/99/kill", "POST", headers) == 404
    assert _status(server, f"/api/trials/{trial}/kill", "POST") == 403


def test_a_failed_request_is_one_line_and_a_gone_browser_none(server, capsys):
    for error in (RuntimeError("boom"), BrokenPipeError(32, "Broken pipe")):
        try:
            raise error
        except Exception:
            server.handle_error(None, ("127.0.0.1", 5555))
    assert capsys.readouterr().err == "det-lite ui: a request from 127.0.0.1 failed: RuntimeError\n"
