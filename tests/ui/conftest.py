"""The chromium tests' shared site (``browser.py``): one store, one ``det-lite ui`` and one
browser for the package's browser tests (``test_browser.py``, ``test_browser_views.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Dict, Iterator

import pytest

from tests.cli_helpers import REPO
from tests.ui.browser import WAIT_S, browser, make_experiments, read_url, start_ui


@pytest.fixture(scope="package")
def site(tmp_path_factory) -> Iterator[Dict[str, Any]]:
    tmp = str(tmp_path_factory.mktemp("ui"))
    env = {**os.environ, "DET_LITE_HOME": os.path.join(tmp, "home")}
    make_experiments(tmp, env)
    ui = start_ui(env)
    driver = None
    try:
        url = read_url(ui)
        driver = browser()
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
