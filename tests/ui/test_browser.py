"""det-lite ui in a real browser: Debian's headless chromium driven by Selenium.

One store for the module: a finished 2-trial grid (trained by ``det-lite experiment create``)
and an experiment running in the background (slow batches), served by a ``det-lite ui``
subprocess. Every test fails on a JavaScript error in the page (the browser's console log at
SEVERE level). The browser is required: install it with ``bash scripts/install-browser.sh``;
these tests never skip. ``DET_LITE_SCREENSHOT=docs/dashboard.png`` saves the README's picture.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from determined_lite.store import Store
from tests.cli_helpers import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
WAIT_S = 30


def _det_lite(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"det-lite {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc


def _config(tmp: str, file: str, **changes: Any) -> str:
    """The linear fixture's config with top-level ``changes`` and its ``hyperparameters`` updated."""
    with open(os.path.join(LINEAR, "const.yaml")) as f:
        config = yaml.safe_load(f)
    config["hyperparameters"].update(changes.pop("hyperparameters", {}))
    config.update(changes)
    path = os.path.join(tmp, file)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


ASHA_HPARAMS = {
    "lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1},
    "global_batch_size": {"type": "categorical", "vals": [2, 4]},
    "dataset_size": {"type": "int", "minval": 8, "maxval": 16},
}


def _experiments(tmp: str, env: Dict[str, str]) -> None:
    """Experiment 1: a finished grid of two trials; 2: a finished 3-hyperparameter ASHA search;
    3: running (0.5 s batches)."""
    grid = _config(
        tmp,
        "grid.yaml",
        name="grid-demo",
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
        hyperparameters={"lr": {"type": "categorical", "vals": [0.01, 0.05]}},
        min_validation_period={"batches": 2},
    )
    _det_lite(env, "experiment", "create", grid, LINEAR)
    asha = {
        "name": "adaptive_asha",
        "metric": "val_loss",
        "max_trials": 6,
        "max_length": {"batches": 8},
        "divisor": 2,
        "max_rungs": 2,
        "mode": "aggressive",
    }
    asha_config = _config(tmp, "asha.yaml", name="asha-demo", searcher=asha, hyperparameters=ASHA_HPARAMS)
    _det_lite(env, "experiment", "create", asha_config, LINEAR)
    searcher = {"name": "single", "metric": "val_loss", "max_length": {"batches": 4000}}
    slow = _config(tmp, "slow.yaml", name="slow-run", searcher=searcher, hyperparameters={"sleep_s": 0.5})
    _det_lite(env, "experiment", "create", "--detach", slow, LINEAR)


def _start_ui(env: Dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )


def _read_url(proc: subprocess.Popen) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    assert ready, "det-lite ui printed no URL"
    line = proc.stdout.readline()
    assert line.startswith("det-lite dashboard at http://127.0.0.1:"), line
    return line.split()[3]


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    assert not missing, f"no {' '.join(missing)}: run `bash scripts/install-browser.sh`"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Dict[str, Any]]:
    tmp = str(tmp_path_factory.mktemp("ui"))
    env = {**os.environ, "DET_LITE_HOME": os.path.join(tmp, "home")}
    _experiments(tmp, env)
    ui = _start_ui(env)
    driver = None
    try:
        url = _read_url(ui)
        driver = _browser()
        yield {
            "url": url,
            "base": url.split("/?")[0],
            "driver": driver,
            "home": env["DET_LITE_HOME"],
            "env": env,
        }
    finally:
        if driver is not None:
            driver.quit()
        ui.send_signal(signal.SIGINT)
        assert ui.wait(timeout=WAIT_S) == 0
        subprocess.run(
            [sys.executable, "-m", "determined_lite.cli", "experiment", "kill", "3"], env=env, cwd=REPO
        )


@pytest.fixture
def page(site) -> Iterator[Any]:
    """The browser, failing the test on any JavaScript error the page logged."""
    driver = site["driver"]
    driver.get_log("browser")  # forget earlier tests' entries
    yield driver
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"JavaScript errors: {errors}"


def _store(site) -> Store:
    return Store(os.path.join(site["home"], "det-lite.db"))


def _wait(driver, script: str, what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``return <script>`` in the page until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} ({script})")


def _open(site, driver, route: str) -> None:
    driver.get(f"{site['url']}#{route}")
    _wait(driver, f"document.body.dataset.ready === {route!r}", f"page {route}")


def _experiment_row(driver, experiment_id: int) -> Dict[str, str]:
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-experiment='${arguments[0]}']`);"
        "return r && {name: r.querySelector('.exp-name').textContent,"
        " state: r.querySelector('.state').dataset.state, link: r.querySelector('a').getAttribute('href')};",
        experiment_id,
    )


def test_list_shows_finished_and_running_experiments_live(site, page):
    _open(site, page, "/")
    done = _experiment_row(page, 1)
    assert done == {"name": "grid-demo", "state": "COMPLETED", "link": "#/experiments/1"}
    assert _experiment_row(page, 3)["state"] == "ACTIVE"
    _store(site).experiments.create({"name": "appears-live"}, None, None, state="PAUSED")
    _wait(page, "document.querySelector(`tr[data-experiment='4']`)", "the new experiment without a reload")
    assert _experiment_row(page, 4)["name"] == "appears-live"
    page.find_element("id", "filter-name").send_keys("grid")
    _wait(page, "document.querySelectorAll('#experiments tr').length === 1", "the name filter")
    assert _experiment_row(page, 1)["state"] == "COMPLETED"


def test_list_names_the_searcher_metric_and_its_direction(site, page):
    _open(site, page, "/")
    best = min(t["best_validation"] for t in _store(site).trials.list(1))
    text = page.find_element("css selector", "tr[data-experiment='1'] .best-metric").text
    assert text.startswith("val_loss ↓ ") and float(text.split()[-1]) == pytest.approx(best, rel=1e-3)


def _buttons(page) -> List[str]:
    """The experiment's action buttons (the TensorBoard button, always there, aside)."""
    return page.execute_script(
        "return [...document.querySelectorAll('#actions button')].map((b) => b.id)"
        ".filter((id) => id !== 'tensorboard')"
    )


def test_actions_only_where_they_apply_and_the_cli_state_words(site, page):
    _open(site, page, "/experiments/1")
    assert _buttons(page) == []  # finished: nothing to pause, activate or kill
    _open(site, page, "/experiments/3")
    _wait(page, "document.querySelectorAll('#actions button').length > 1", "the buttons")
    assert _buttons(page) == ["pause", "kill"]
    # Where its trial runs, as the runner recorded it, live.
    _wait(page, "document.querySelector('#trials tbody tr td:last-child').textContent !== '-'", "where")
    [[run]] = _store(site).trials.runs(3).values()
    where = page.find_element("css selector", "#trials tbody tr td:last-child").text
    assert where == f"{run['host']} ({run['executor']}, 1 slot)"
    _open(site, page, "/experiments/2")
    stopped = {t["id"] for t in _store(site).trials.list(2) if t["stopped_early"]}
    assert stopped, "the ASHA search stopped no trial early"
    shown = page.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#trials tbody tr')]"
        ".map((r) => [r.dataset.trial, r.querySelector('.state').textContent]))"
    )
    assert {int(k) for k, v in shown.items() if v == "ASHA-stopped"} == stopped, shown
    assert "COMPLETED" not in {shown[str(t)] for t in stopped}


def _curve_data(driver, chart: str) -> List[Dict[str, Any]]:
    """Each series of the uPlot chart ``chart``: its label and its (x, y) points with a value."""
    return driver.execute_script(
        "const c = detLite.charts[arguments[0]];"
        "return c.series.slice(1).map((s, i) => ({label: s.label,"
        " points: c.data[0].map((x, j) => [x, c.data[i + 1][j]]).filter((p) => p[1] !== null)}));",
        chart,
    )


def test_experiment_page_draws_one_curve_per_trial(site, page):
    _open(site, page, "/experiments/1")
    assert page.find_element("id", "experiment-name").text == "grid-demo"
    rows = page.find_elements("css selector", "#trials tbody tr")
    assert [r.get_attribute("data-trial") for r in rows] == ["1", "2"]
    store = _store(site)
    series = _curve_data(page, "curves")
    assert [s["label"] for s in series] == ["trial 1", "trial 2"]
    for one, trial_id in zip(series, (1, 2)):
        reported = [
            (m["total_batches"], m["metrics"]["val_loss"]) for m in store.metrics.validation(trial_id)
        ]
        assert [p[0] for p in one["points"]] == [b for b, _ in reported] == [2, 4, 6, 8, 10, 12]
        assert [p[1] for p in one["points"]] == pytest.approx([v for _, v in reported])
    page.find_element("id", "curves-log").click()  # log scale redraws with the same data
    _wait(page, "detLite.charts.curves.scales.y.distr === 3", "the log scale")
    assert len(_curve_data(page, "curves")[0]["points"]) == 6


def _asha(site) -> List[Dict[str, Any]]:
    return _store(site).trials.list(2)


def test_asha_parallel_coordinates(site, page, tmp_path):
    _open(site, page, "/experiments/2")
    drawn = page.execute_script("return detLite.data.parcoords")
    assert drawn["axes"] == ["dataset_size", "global_batch_size", "lr", "val_loss"]  # the config's order
    assert drawn["scales"][:3] == ["linear", "categorical", "log"]  # as the config types them
    trials = {t["id"]: t for t in _asha(site)}
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


def _view(page, name: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(page.find_element("id", "hparam-view")).select_by_value(name)


def test_asha_scatter_matrix_and_heat_map(site, page):
    _open(site, page, "/experiments/2")
    trials = _asha(site)
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


def _same_points(points: List[List[float]], reported: List[Any]) -> None:
    assert [p[0] for p in points] == [r[0] for r in reported]
    assert [p[1] for p in points] == pytest.approx([r[1] for r in reported])


def _trial_rows(page) -> List[int]:
    return [
        int(r.get_attribute("data-trial")) for r in page.find_elements("css selector", "#trials tbody tr")
    ]


def test_trial_table_sorts_and_filters(site, page):
    from selenium.webdriver.support.ui import Select

    _open(site, page, "/experiments/2")
    trials = _asha(site)
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
    _open(site, page, "/experiments/1")
    for box in page.find_elements("css selector", "#trials tbody input.pick"):
        box.click()
    link = page.find_element("id", "compare-link")
    assert link.text == "Compare selected (2)" and link.get_attribute("href").endswith("#/compare/1,2")
    link.click()
    _wait(page, "document.body.dataset.ready === '/compare/1,2'", "the comparison page")
    store = _store(site)
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
    series = _curve_data(page, "compare-curves")
    assert [s["label"] for s in series] == ["trial 1", "trial 2"]
    for one, trial_id in zip(series, (1, 2)):
        reported = [
            (m["total_batches"], m["metrics"]["val_loss"]) for m in store.metrics.validation(trial_id)
        ]
        _same_points(one["points"], reported)


def test_training_and_validation_overlaid(site, page):
    from selenium.webdriver.support.ui import Select

    _open(site, page, "/experiments/1")
    Select(page.find_element("id", "curves-kind")).select_by_value("both")
    _wait(page, "detLite.charts.curves.series.length === 5", "four curves")
    series = _curve_data(page, "curves")
    assert [s["label"] for s in series] == [
        "trial 1 training loss",
        "trial 2 training loss",
        "trial 1 validation val_loss",
        "trial 2 validation val_loss",
    ]
    store = _store(site)
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
        _same_points(one["points"], [(r["total_batches"], r["metrics"][metric]) for r in rows])


def test_labels_and_notes(site, page):
    _open(site, page, "/experiments/1")
    page.find_element("id", "labels").send_keys("baseline, grid")
    page.find_element("id", "notes").send_keys("lr 0.05 wins")
    page.find_element("id", "save-annotations").click()
    _wait(page, "document.getElementById('annotations-message').textContent === 'saved'", "the save")
    assert _store(site).experiments.annotations(1) == {
        "labels": ["baseline", "grid"],
        "notes": "lr 0.05 wins",
    }
    _open(site, page, "/")
    _open(site, page, "/experiments/1")
    assert page.find_element("id", "labels").get_attribute("value") == "baseline, grid"


def test_model_registry_page(site, page):
    store = _store(site)
    best = min(store.checkpoints.list(experiment_id=1), key=lambda c: c["metrics"]["val_loss"])
    store.models.create("linear-regressor", description="y = 2x", labels=["prod"])
    store.models.add_version("linear-regressor", best["uuid"])
    _open(site, page, "/models")
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
    _open(site, page, "/experiments/1")
    page.find_element("id", "tensorboard").click()
    link = _wait(page, "document.getElementById('tensorboard-link')", "TensorBoard's link", timeout=120)
    url = link.get_attribute("href")
    assert url.startswith("http://127.0.0.1:")
    import json

    with urllib.request.urlopen(url + "data/runs", timeout=WAIT_S) as response:
        runs = json.loads(response.read())
    assert sorted(runs) == ["trial_1", "trial_2"]  # the experiment's event files, one run per trial
    page.find_element("id", "tensorboard").click()  # a second press: the same server
    _wait(page, f"document.getElementById('tensorboard-link').href === {url!r}", "the same URL")


def test_kill_one_trial_from_its_page(site, page):
    store = _store(site)
    exp = store.experiments.create({"name": "trial-kill"}, None, None, state="PAUSED")
    trial = store.trials.create(exp, 0, {"lr": 0.1}, 0)
    _open(site, page, f"/trials/{trial}")
    page.find_element("id", "kill-trial").click()
    page.switch_to.alert.accept()
    _wait(page, "document.getElementById('trial-action-message').textContent", "the answer")
    assert page.find_element("id", "trial-action-message").text == f"Killed trial {trial}"
    assert store.trials.get(trial)["state"] == "CANCELED"
    _open(site, page, "/trials/1")  # a finished trial: nothing to kill
    assert not page.find_elements("id", "kill-trial")


def test_logs_and_search(site, page):
    _open(site, page, "/experiments/1")
    _wait(
        page, "document.getElementById('logs').textContent.includes('experiment 1 COMPLETED')", "the log tail"
    )
    box = page.find_element("id", "log-search")
    box.send_keys("validation: val_loss")
    box.send_keys("\n")
    _wait(page, "!document.getElementById('logs').textContent.includes('COMPLETED')", "the log search")
    lines = page.find_element("id", "logs").text.splitlines()
    assert lines and all("validation: val_loss" in line for line in lines)
    assert page.find_element("id", "config").text.startswith("name: grid-demo")


def test_trial_page(site, page):
    _open(site, page, "/trials/2")
    series = _curve_data(page, "trial-curves")
    assert [s["label"] for s in series] == ["trial 2"] and len(series[0]["points"]) == 6
    assert "lr" in page.find_element("id", "trial-hparams").text
    [run] = _store(site).trials.runs(1)[2]  # each run of the trial: where the runner placed it
    cells = [c.text for c in page.find_elements("css selector", "#trial-runs tbody td")]
    assert cells[1:] == [run["executor"], run["host"], "1", "-"]
    links = page.find_elements("css selector", "#checkpoints tbody a.download")
    assert links
    uuid = links[0].find_element("xpath", "./ancestor::tr").get_attribute("data-uuid")
    with urllib.request.urlopen(links[0].get_attribute("href"), timeout=WAIT_S) as response:
        body = response.read()
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        names = sorted(archive.getnames())
    directory = _store(site).checkpoints.get(uuid)["path"]
    expected = sorted(
        os.path.join(uuid, os.path.relpath(os.path.join(root, f), directory))
        for root, _, files in os.walk(directory)
        for f in files
    )
    assert names == expected and any(n.endswith(".pth") or "state" in n for n in names)


def _press(page, button: str) -> None:
    page.execute_script("document.getElementById('action-message').textContent = ''")  # the last answer
    page.find_element("id", button).click()
    page.switch_to.alert.accept()  # the confirmation
    _wait(page, "document.getElementById('action-message').textContent", f"{button}'s answer")


def test_pause_and_kill_from_the_page_change_the_store(site, page):
    store = _store(site)
    _open(site, page, "/experiments/3")
    _press(page, "pause")
    assert "Requested pause of experiment 3" in page.find_element("id", "action-message").text
    deadline = time.monotonic() + 120
    while store.experiments.get(3)["state"] != "PAUSED":  # the runner checkpoints and stops
        assert time.monotonic() < deadline, store.experiments.get(3)
        time.sleep(0.5)
    _wait(
        page,
        "document.querySelector('#experiment-head .state').dataset.state === 'PAUSED'",
        "PAUSED on the page",
    )
    assert _buttons(page) == ["activate", "kill"]
    _press(page, "kill")
    assert store.experiments.get(3)["state"] == "CANCELED"
    assert "it is now CANCELED" in page.find_element("id", "action-message").text


def test_a_page_without_the_token_says_where_to_get_it(site, page):
    for path in ("/api/experiments", "/api/experiments/1"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(site["base"] + path, timeout=WAIT_S)
        assert refused.value.code == 403
    assert not page.get_cookies()  # no cookie: a browser would send it to every port of the host
    page.execute_script("localStorage.clear()")
    page.get(site["base"] + "/")
    _wait(page, "document.getElementById('page-error')", "the refusal")
    assert page.find_element("id", "page-error").text == (
        "forbidden: open the URL det-lite ui printed (it carries the token)"
    )
    page.get_log("browser")  # the refused requests are the point here, not a script error
    page.get(site["url"])  # the token again, for the next tests
    _wait(page, "document.body.dataset.ready", "the page with its token")
