"""What det-lite ui's chromium tests share (``conftest.py`` holds the fixtures): the
experiments they look at, ``det-lite ui`` in a subprocess, the browser, and waiting in the page."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest
import yaml

from determined_lite.store import Store
from tests.cli_helpers import REPO

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
WAIT_S = 30


def det_lite(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"det-lite {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc


def config_file(tmp: str, file: str, **changes: Any) -> str:
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


def make_experiments(tmp: str, env: Dict[str, str]) -> None:
    """Experiment 1: a finished grid of two trials; 2: a finished 3-hyperparameter ASHA search;
    3: running (0.5 s batches)."""
    grid = config_file(
        tmp,
        "grid.yaml",
        name="grid-demo",
        searcher={"name": "grid", "metric": "val_loss", "max_length": {"batches": 12}},
        hyperparameters={"lr": {"type": "categorical", "vals": [0.01, 0.05]}},
        min_validation_period={"batches": 2},
    )
    det_lite(env, "experiment", "create", grid, LINEAR)
    asha = {
        "name": "adaptive_asha",
        "metric": "val_loss",
        "max_trials": 6,
        "max_length": {"batches": 8},
        "divisor": 2,
        "max_rungs": 2,
        "mode": "aggressive",
    }
    asha_config = config_file(tmp, "asha.yaml", name="asha-demo", searcher=asha, hyperparameters=ASHA_HPARAMS)
    det_lite(env, "experiment", "create", asha_config, LINEAR)
    searcher = {"name": "single", "metric": "val_loss", "max_length": {"batches": 4000}}
    slow = config_file(tmp, "slow.yaml", name="slow-run", searcher=searcher, hyperparameters={"sleep_s": 0.5})
    det_lite(env, "experiment", "create", "--detach", slow, LINEAR)


def start_ui(env: Dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )


def read_url(proc: subprocess.Popen) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    assert ready, "det-lite ui printed no URL"
    line = proc.stdout.readline()
    assert line.startswith("det-lite dashboard at http://127.0.0.1:"), line
    return line.split()[3]


def browser() -> Any:
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


def store_of(site) -> Store:
    return Store(os.path.join(site["home"], "det-lite.db"))


def wait(driver, script: str, what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``return <script>`` in the page until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} ({script})")


def open_route(site, driver, route: str) -> None:
    driver.get(f"{site['url']}#{route}")
    wait(driver, f"document.body.dataset.ready === {route!r}", f"page {route}")


def curve_data(driver, chart: str) -> List[Dict[str, Any]]:
    """Each series of the uPlot chart ``chart``: its label and its (x, y) points with a value."""
    return driver.execute_script(
        "const c = detLite.charts[arguments[0]];"
        "return c.series.slice(1).map((s, i) => ({label: s.label,"
        " points: c.data[0].map((x, j) => [x, c.data[i + 1][j]]).filter((p) => p[1] !== null)}));",
        chart,
    )


def same_points(points: List[List[float]], reported: List[Any]) -> None:
    assert [p[0] for p in points] == [r[0] for r in reported]
    assert [p[1] for p in points] == pytest.approx([r[1] for r in reported])


def asha_trials(site) -> List[Dict[str, Any]]:
    return store_of(site).trials.list(2)
