"""det-lite ui in a real browser: Debian's headless chromium driven by Selenium.

One store for the package's browser tests (``conftest.py``, ``browser.py``): a finished 2-trial
grid (trained by ``det-lite experiment create``), a finished 3-hyperparameter ASHA search and an
experiment running in the background (slow batches), served by a ``det-lite ui`` subprocess; the
views are in ``test_browser_views.py``. Every test fails on a JavaScript error in the page (the
browser's console log at SEVERE level). The browser is required: install it with ``bash
scripts/install-browser.sh``; these tests never skip.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from typing import Dict, List

import pytest

from tests.ui.browser import WAIT_S, curve_data, open_route, store_of, wait

# One xdist group for both browser modules: they share the package-scoped `site` (one
# dashboard and store, tests/ui/conftest.py), whose ids test_browser.py's tests count on
# running first, as in one process (tests/schedule.py keeps a group's order).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("browser")]


def _experiment_row(driver, experiment_id: int) -> Dict[str, str]:
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-experiment='${arguments[0]}']`);"
        "return r && {name: r.querySelector('.exp-name').textContent,"
        " state: r.querySelector('.state').dataset.state, link: r.querySelector('a').getAttribute('href')};",
        experiment_id,
    )


def test_list_shows_finished_and_running_experiments_live(site, page):
    open_route(site, page, "/")
    done = _experiment_row(page, 1)
    assert done == {"name": "grid-demo", "state": "COMPLETED", "link": "#/experiments/1"}
    assert _experiment_row(page, 3)["state"] == "ACTIVE"
    store_of(site).experiments.create({"name": "appears-live"}, None, None, state="PAUSED")
    wait(page, "document.querySelector(`tr[data-experiment='4']`)", "the new experiment without a reload")
    assert _experiment_row(page, 4)["name"] == "appears-live"
    page.find_element("id", "filter-name").send_keys("grid")
    wait(page, "document.querySelectorAll('#experiments tr').length === 1", "the name filter")
    assert _experiment_row(page, 1)["state"] == "COMPLETED"


def test_list_names_the_searcher_metric_and_its_direction(site, page):
    open_route(site, page, "/")
    best = min(t["best_validation"] for t in store_of(site).trials.list(1))
    text = page.find_element("css selector", "tr[data-experiment='1'] .best-metric").text
    assert text.startswith("val_loss ↓ ") and float(text.split()[-1]) == pytest.approx(best, rel=1e-3)


def _buttons(page) -> List[str]:
    """The experiment's action buttons (the TensorBoard button, always there, aside)."""
    return page.execute_script(
        "return [...document.querySelectorAll('#actions button')].map((b) => b.id)"
        ".filter((id) => id !== 'tensorboard')"
    )


def test_actions_only_where_they_apply_and_the_cli_state_words(site, page):
    open_route(site, page, "/experiments/1")
    assert _buttons(page) == []  # finished: nothing to pause, activate or kill
    open_route(site, page, "/experiments/3")
    wait(page, "document.querySelectorAll('#actions button').length > 1", "the buttons")
    assert _buttons(page) == ["pause", "kill"]
    # Where its trial runs, as the runner recorded it, live.
    wait(page, "document.querySelector('#trials tbody tr td:last-child').textContent !== '-'", "where")
    [[run]] = store_of(site).trials.runs(3).values()
    where = page.find_element("css selector", "#trials tbody tr td:last-child").text
    assert where == f"{run['host']} ({run['executor']}, 1 slot)"
    open_route(site, page, "/experiments/2")
    stopped = {t["id"] for t in store_of(site).trials.list(2) if t["stopped_early"]}
    assert stopped, "the ASHA search stopped no trial early"
    shown = page.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#trials tbody tr')]"
        ".map((r) => [r.dataset.trial, r.querySelector('.state').textContent]))"
    )
    assert {int(k) for k, v in shown.items() if v == "ASHA-stopped"} == stopped, shown
    assert "COMPLETED" not in {shown[str(t)] for t in stopped}


def test_experiment_page_draws_one_curve_per_trial(site, page):
    open_route(site, page, "/experiments/1")
    assert page.find_element("id", "experiment-name").text == "grid-demo"
    rows = page.find_elements("css selector", "#trials tbody tr")
    assert [r.get_attribute("data-trial") for r in rows] == ["1", "2"]
    store = store_of(site)
    series = curve_data(page, "curves")
    assert [s["label"] for s in series] == ["trial 1", "trial 2"]
    for one, trial_id in zip(series, (1, 2)):
        reported = [
            (m["total_batches"], m["metrics"]["val_loss"]) for m in store.metrics.validation(trial_id)
        ]
        assert [p[0] for p in one["points"]] == [b for b, _ in reported] == [2, 4, 6, 8, 10, 12]
        assert [p[1] for p in one["points"]] == pytest.approx([v for _, v in reported])
    page.find_element("id", "curves-log").click()  # log scale redraws with the same data
    wait(page, "detLite.charts.curves.scales.y.distr === 3", "the log scale")
    assert len(curve_data(page, "curves")[0]["points"]) == 6


def test_logs_and_search(site, page):
    open_route(site, page, "/experiments/1")
    wait(
        page, "document.getElementById('logs').textContent.includes('experiment 1 COMPLETED')", "the log tail"
    )
    box = page.find_element("id", "log-search")
    box.send_keys("validation: val_loss")
    box.send_keys("\n")
    wait(page, "!document.getElementById('logs').textContent.includes('COMPLETED')", "the log search")
    lines = page.find_element("id", "logs").text.splitlines()
    assert lines and all("validation: val_loss" in line for line in lines)
    assert page.find_element("id", "config").text.startswith("name: grid-demo")


def test_trial_page(site, page):
    open_route(site, page, "/trials/2")
    series = curve_data(page, "trial-curves")
    assert [s["label"] for s in series] == ["trial 2"] and len(series[0]["points"]) == 6
    assert "lr" in page.find_element("id", "trial-hparams").text
    [run] = store_of(site).trials.runs(1)[2]  # each run of the trial: where the runner placed it
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
    directory = store_of(site).checkpoints.get(uuid)["path"]
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
    wait(page, "document.getElementById('action-message').textContent", f"{button}'s answer")


def test_pause_and_kill_from_the_page_change_the_store(site, page):
    store = store_of(site)
    open_route(site, page, "/experiments/3")
    _press(page, "pause")
    assert "Requested pause of experiment 3" in page.find_element("id", "action-message").text
    deadline = time.monotonic() + 120
    while store.experiments.get(3)["state"] != "PAUSED":  # the runner checkpoints and stops
        assert time.monotonic() < deadline, store.experiments.get(3)
        time.sleep(0.5)
    wait(
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
    wait(page, "document.getElementById('page-error')", "the refusal")
    assert page.find_element("id", "page-error").text == (
        "forbidden: open the URL det-lite ui printed (it carries the token)"
    )
    page.get_log("browser")  # the refused requests are the point here, not a script error
    page.get(site["url"])  # the token again, for the next tests
    wait(page, "document.body.dataset.ready", "the page with its token")
