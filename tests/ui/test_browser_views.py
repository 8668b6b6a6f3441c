"""det-lite ui's views in chromium (the site of ``conftest.py``): a 3-hyperparameter ASHA
search's parallel coordinates, scatter matrix and heat map; the trial table sorted and filtered;
a 2-trial comparison; training and validation overlaid; labels and notes, the model registry,
the TensorBoard button, a trial's Kill. Every test fails on a JavaScript error in the page.
``DET_LITE_SCREENSHOT=docs/dashboard.png`` saves the README's picture."""

from __future__ import annotations

import os
import urllib.request
from typing import Any, Dict, List

import pytest

from tests.ui.browser import WAIT_S, asha_trials, curve_data, open_route, same_points, store_of, wait

# One xdist group for both browser modules: they share the package-scoped `site` (one
# dashboard and store, tests/ui/conftest.py), whose ids test_browser.py's tests count on
# running first, as in one process (tests/schedule.py keeps a group's order).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("browser")]


def _view(page, name: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(page.find_element("id", "hparam-view")).select_by_value(name)


def _trial_rows(page) -> List[int]:
    return [
        int(r.get_attribute("data-trial")) for r in page.find_elements("css selector", "#trials tbody tr")
    ]


def test_asha_parallel_coordinates(site, page, tmp_path):
    open_route(site, page, "/experiments/2")
    drawn = page.execute_script("return detLite.data.parcoords")
    assert drawn["axes"] == ["dataset_size", "global_batch_size", "lr", "val_loss"]  # the config's order
    assert drawn["scales"][:3] == ["linear", "categorical", "log"]  # as the config types them
    trials = {t["id"]: t for t in asha_trials(site)}
    assert len(trials) == 6 and sorted(line["trial_id"] for line in drawn["lines"]) == sorted(trials)
    for line in drawn["lines"]:
        hp = trials[line["trial_id"]]["hparams"]
        expected = [hp["dataset_size"], hp["global_batch_size"], hp["lr"]]
        assert line["values"][:3] == pytest.approx(expected)
        assert line["values"][3] == pytest.approx(trials[line["trial_id"]]["best_validation"])
    # Coloured by the searcher metric: the best trial blue, the worst red.
    by_metric = sorted(drawn["lines"], key=lambda line: line["values"][3])
    assert by_metric[0]["color"] == "hsl(220, 75%, 45%)" and by_metric[-1]["color"] == "hsl(0, 75%, 45%)"
    # ASHA's rungs: the trials of the last rung trained to the end, none of them "stopped".
    rungs = page.find_elements("css selector", "#rungs .rung")
    assert len(rungs) == 2 and "stopped" in rungs[0].text and "stopped" not in rungs[1].text
    polylines = page.find_elements("css selector", "#parcoords polyline")
    assert len(polylines) == 6 and polylines[0].is_displayed()
    shot = os.environ.get("DET_LITE_SCREENSHOT") or str(tmp_path / "dashboard.png")
    page.execute_script("window.scrollTo(0, 0)")
    assert page.save_screenshot(shot)
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_asha_scatter_matrix_and_heat_map(site, page):
    open_route(site, page, "/experiments/2")
    trials = asha_trials(site)
    _view(page, "scatter")
    drawn = page.execute_script("return detLite.data.scatter")
    assert len(drawn["cells"]) == 9
    diagonal = next(c for c in drawn["cells"] if c["row"] == c["col"] == "lr")
    assert diagonal["y"] == "val_loss"
    assert sorted(map(tuple, diagonal["points"])) == pytest.approx(
        sorted((t["hparams"]["lr"], t["best_validation"], t["id"]) for t in trials)
    )
    pair = next(c for c in drawn["cells"] if (c["row"], c["col"]) == ("dataset_size", "lr"))
    assert sorted(map(tuple, pair["points"])) == pytest.approx(
        sorted((t["hparams"]["lr"], t["hparams"]["dataset_size"], t["id"]) for t in trials)
    )
    assert len(page.find_elements("css selector", "#scatter-matrix circle")) == 9 * 6
    _view(page, "heatmap")
    from selenium.webdriver.support.ui import Select

    Select(page.find_element("id", "heatmap-x")).select_by_value("global_batch_size")
    Select(page.find_element("id", "heatmap-y")).select_by_value("dataset_size")
    drawn = page.execute_script("return detLite.data.heatmap")
    assert (drawn["x"], drawn["y"]) == ("global_batch_size", "dataset_size")
    best: Dict[Any, float] = {}
    for t in trials:
        key = (str(t["hparams"]["global_batch_size"]), str(t["hparams"]["dataset_size"]))
        best[key] = min(best.get(key, float("inf")), t["best_validation"])
    cells = {(drawn["xbins"][c["x"]], drawn["ybins"][c["y"]]): c["value"] for c in drawn["cells"]}
    assert cells == pytest.approx(best)
    assert len(page.find_elements("css selector", "#heatmap td.heat:not(.empty)")) == len(best)


def test_trial_table_sorts_and_filters(site, page):
    from selenium.webdriver.support.ui import Select

    open_route(site, page, "/experiments/2")
    trials = asha_trials(site)
    by_metric = [t["id"] for t in sorted(trials, key=lambda t: t["best_validation"])]
    header = page.find_element("xpath", "//table[@id='trials']//th[starts-with(., 'val_loss')]")
    header.click()
    assert _trial_rows(page) == by_metric
    page.find_element("xpath", "//table[@id='trials']//th[starts-with(., 'val_loss')]").click()
    assert _trial_rows(page) == by_metric[::-1]
    page.find_element("xpath", "//table[@id='trials']//th[starts-with(., 'lr')]").click()
    assert _trial_rows(page) == [t["id"] for t in sorted(trials, key=lambda t: t["hparams"]["lr"])]
    stopped = sorted(t["id"] for t in trials if t["stopped_early"])
    Select(page.find_element("id", "trial-state")).select_by_value("ASHA-stopped")
    assert sorted(_trial_rows(page)) == stopped
    assert page.find_element("id", "trials-title").text == f"Trials ({len(stopped)} of 6)"
    Select(page.find_element("id", "trial-state")).select_by_value("")
    page.find_element("id", "trial-filter").send_keys("asha")  # any cell, any case
    assert sorted(_trial_rows(page)) == stopped


def test_two_trial_comparison(site, page):
    open_route(site, page, "/experiments/1")
    for box in page.find_elements("css selector", "#trials tbody input.pick"):
        box.click()
    link = page.find_element("id", "compare-link")
    assert link.text == "Compare selected (2)" and link.get_attribute("href").endswith("#/compare/1,2")
    link.click()
    wait(page, "document.body.dataset.ready === '/compare/1,2'", "the comparison page")
    store = store_of(site)
    cells = page.execute_script(
        "const out = {}; document.querySelectorAll('#compare-table tbody tr').forEach((r) => {"
        " const th = r.querySelector('th');"
        " const tds = [...r.querySelectorAll('td')].map((d) => d.textContent);"
        " if (tds.length) out[th.textContent] = tds; }); return out;"
    )
    assert cells["lr"] == ["0.0100", "0.0500"]
    best = [store.trials.get(t)["best_validation"] for t in (1, 2)]
    assert [float(c.split()[-1]) for c in cells["Best searcher metric"]] == pytest.approx(best, rel=1e-3)
    assert all(c.startswith("val_loss ↓ ") for c in cells["Best searcher metric"])
    assert [float(v) for v in cells["val_loss"]] == pytest.approx(best, rel=1e-3)
    series = curve_data(page, "compare-curves")
    assert [s["label"] for s in series] == ["trial 1", "trial 2"]
    for one, trial_id in zip(series, (1, 2)):
        reported = [
            (m["total_batches"], m["metrics"]["val_loss"]) for m in store.metrics.validation(trial_id)
        ]
        same_points(one["points"], reported)


def test_training_and_validation_overlaid(site, page):
    from selenium.webdriver.support.ui import Select

    open_route(site, page, "/experiments/1")
    Select(page.find_element("id", "curves-kind")).select_by_value("both")
    wait(page, "detLite.charts.curves.series.length === 5", "four curves")
    series = curve_data(page, "curves")
    assert [s["label"] for s in series] == [
        "trial 1 training loss",
        "trial 2 training loss",
        "trial 1 validation val_loss",
        "trial 2 validation val_loss",
    ]
    store = store_of(site)
    for one, (trial_id, kind, metric) in zip(
        series,
        [
            (1, "training", "loss"),
            (2, "training", "loss"),
            (1, "validation", "val_loss"),
            (2, "validation", "val_loss"),
        ],
    ):
        rows = store.metrics.training(trial_id) if kind == "training" else store.metrics.validation(trial_id)
        same_points(one["points"], [(r["total_batches"], r["metrics"][metric]) for r in rows])


def test_labels_and_notes(site, page):
    open_route(site, page, "/experiments/1")
    page.find_element("id", "labels").send_keys("baseline, grid")
    page.find_element("id", "notes").send_keys("lr 0.05 wins")
    page.find_element("id", "save-annotations").click()
    wait(page, "document.getElementById('annotations-message').textContent === 'saved'", "the save")
    assert store_of(site).experiments.annotations(1) == {
        "labels": ["baseline", "grid"],
        "notes": "lr 0.05 wins",
    }
    open_route(site, page, "/")
    open_route(site, page, "/experiments/1")
    assert page.find_element("id", "labels").get_attribute("value") == "baseline, grid"


def test_model_registry_page(site, page):
    store = store_of(site)
    best = min(store.checkpoints.list(experiment_id=1), key=lambda c: c["metrics"]["val_loss"])
    store.models.create("linear-regressor", description="y = 2x", labels=["prod"])
    store.models.add_version("linear-regressor", best["uuid"])
    open_route(site, page, "/models")
    section = page.find_element("css selector", "section[data-model='linear-regressor']")
    assert "y = 2x · labels: prod · 1 version" in section.text
    row = section.find_element("css selector", "tr[data-version='1']")
    assert best["uuid"] in row.text and f"trial {best['trial_id']}" in row.text
    assert (
        row.find_element("css selector", "a.download")
        .get_attribute("href")
        .split("?")[0]
        .endswith(f"/api/checkpoints/{best['uuid']}/download")
    )


def test_tensorboard_button(site, page):
    open_route(site, page, "/experiments/1")
    page.find_element("id", "tensorboard").click()
    link = wait(page, "document.getElementById('tensorboard-link')", "TensorBoard's link", timeout=120)
    url = link.get_attribute("href")
    assert url.startswith("http://127.0.0.1:")
    import json

    with urllib.request.urlopen(url + "data/runs", timeout=WAIT_S) as response:
        runs = json.loads(response.read())
    assert sorted(runs) == ["trial_1", "trial_2"]  # the experiment's event files, one run per trial
    page.find_element("id", "tensorboard").click()  # a second press: the same server
    wait(page, f"document.getElementById('tensorboard-link').href === {url!r}", "the same URL")


def test_kill_one_trial_from_its_page(site, page):
    store = store_of(site)
    exp = store.experiments.create({"name": "trial-kill"}, None, None, state="PAUSED")
    trial = store.trials.create(exp, 0, {"lr": 0.1}, 0)
    open_route(site, page, f"/trials/{trial}")
    page.find_element("id", "kill-trial").click()
    page.switch_to.alert.accept()
    wait(page, "document.getElementById('trial-action-message').textContent", "the answer")
    assert page.find_element("id", "trial-action-message").text == f"Killed trial {trial}"
    assert store.trials.get(trial)["state"] == "CANCELED"
    open_route(site, page, "/trials/1")  # a finished trial: nothing to kill
    assert not page.find_elements("id", "kill-trial")
