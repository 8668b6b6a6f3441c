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
import shutil
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


def _experiments(tmp: str, env: Dict[str, str]) -> None:
    """Experiment 1: a finished grid of two trials; experiment 2: running (0.5 s batches)."""
    grid = _config(
        tmp,
        "grid.yaml",
        name="grid-demo",
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
        hyperparameters={"lr": {"type": "categorical", "vals": [0.01, 0.05]}},
        min_validation_period={"batches": 2},
    )
    _det_lite(env, "experiment", "create", grid, LINEAR)
    searcher = {"name": "single", "metric": "val_loss", "max_length": {"batches": 4000}}
    slow = _config(tmp, "slow.yaml", name="slow-run", searcher=searcher, hyperparameters={"sleep_s": 0.5})
    _det_lite(env, "experiment", "create", "--detach", slow, LINEAR)


def _start_ui(env: Dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui"],
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
            [sys.executable, "-m", "determined_lite.cli", "experiment", "kill", "2"], env=env, cwd=REPO
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
    assert _experiment_row(page, 2)["state"] == "ACTIVE"
    _store(site).experiments.create({"name": "appears-live"}, None, None, state="PAUSED")
    _wait(page, "document.querySelector(`tr[data-experiment='3']`)", "the new experiment without a reload")
    assert _experiment_row(page, 3)["name"] == "appears-live"
    page.find_element("id", "filter-name").send_keys("grid")
    _wait(page, "document.querySelectorAll('#experiments tr').length === 1", "the name filter")
    assert _experiment_row(page, 1)["state"] == "COMPLETED"


def _curve_data(driver, chart: str) -> List[Dict[str, Any]]:
    """Each series of the uPlot chart ``chart``: its label and its (x, y) points with a value."""
    return driver.execute_script(
        "const c = detLite.charts[arguments[0]];"
        "return c.series.slice(1).map((s, i) => ({label: s.label,"
        " points: c.data[0].map((x, j) => [x, c.data[i + 1][j]]).filter((p) => p[1] !== null)}));",
        chart,
    )


def test_experiment_page_draws_one_curve_per_trial(site, page, tmp_path):
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
    shot = os.environ.get("DET_LITE_SCREENSHOT") or str(tmp_path / "dashboard.png")
    page.execute_script("window.scrollTo(0, 0)")
    assert page.save_screenshot(shot)
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_hyperparameter_plot(site, page):
    _open(site, page, "/experiments/1")
    points = page.execute_script("return detLite.data['hparam:lr'].points")
    best = {t["hparams"]["lr"]: t["best_validation"] for t in _store(site).trials.list(1)}
    assert [p[0] for p in points] == [0.01, 0.05]
    assert [p[1] for p in points] == pytest.approx([best[0.01], best[0.05]])
    assert page.find_element("css selector", "[data-hparam='lr'] canvas").is_displayed()


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
    assert page.find_elements("css selector", "#checkpoints tbody tr")


def _press(page, button: str) -> None:
    page.execute_script("document.getElementById('action-message').textContent = ''")  # the last answer
    page.find_element("id", button).click()
    page.switch_to.alert.accept()  # the confirmation
    _wait(page, "document.getElementById('action-message').textContent", f"{button}'s answer")


def test_pause_and_kill_from_the_page_change_the_store(site, page):
    store = _store(site)
    _open(site, page, "/experiments/2")
    _press(page, "pause")
    assert "Requested pause of experiment 2" in page.find_element("id", "action-message").text
    deadline = time.monotonic() + 120
    while store.experiments.get(2)["state"] != "PAUSED":  # the runner checkpoints and stops
        assert time.monotonic() < deadline, store.experiments.get(2)
        time.sleep(0.5)
    _wait(
        page,
        "document.querySelector('#experiment-head .state').dataset.state === 'PAUSED'",
        "PAUSED on the page",
    )
    _press(page, "kill")
    assert store.experiments.get(2)["state"] == "CANCELED"
    assert "it is now CANCELED" in page.find_element("id", "action-message").text


def test_a_request_without_the_token_is_refused(site, page):
    for path in ("/", "/api/experiments", "/api/experiments/1", "/static/app.js"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(site["base"] + path, timeout=WAIT_S)
        assert refused.value.code == 403
    page.delete_all_cookies()
    page.execute_script("sessionStorage.clear()")
    page.get(site["base"] + "/")
    assert "forbidden" in page.find_element("tag name", "body").text
    page.get_log("browser")  # the refused page load is the point here, not a script error
    assert shutil.which(CHROMIUM) or os.path.exists(CHROMIUM)
