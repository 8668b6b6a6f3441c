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
        store.trials.update(trial, best_validation=lr / 10, state="COMPLETED")
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


def test_every_request_needs_the_token(server):
    cookie = {"Cookie": f"{server.cookie_name}={server.token}"}
    for path in ("/", "/api/experiments", "/static/app.js", "/static/vendor/uPlot.iife.min.js"):
        assert _status(server, path) == 403
        assert _status(server, path, headers={TOKEN_HEADER: "wrong"}) == 403
        assert _status(server, path, headers=cookie) == 200
    assert _status(server, f"/?token={server.token}") == 200
    assert _status(server, f"/api/experiments?token={server.token}") == 200
    # Changing something: POST with the header; the cookie or the URL's token is not enough.
    assert _status(server, "/api/experiments/2/kill", "POST", headers=cookie) == 403
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
    assert [r["id"] for r in _get(server, "/api/experiments?state=PAUSED")["experiments"]] == [2]
    assert [r["id"] for r in _get(server, "/api/experiments?name=API")["experiments"]] == [1]


def test_experiment_document(server):
    doc = _get(server, "/api/experiments/1")
    assert doc["experiment"]["name"] == "api-demo"
    assert doc["varying"] == ["lr"]
    assert [t["varying"] for t in doc["trials"]] == [{"lr": 0.1}, {"lr": 0.2}]
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
