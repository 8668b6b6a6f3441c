"""Tables fit the terminal (issue 29 item 10): cut the cuttable columns, then leave out the least
useful ones, never cut a number; whole tables when stdout is not a terminal."""

from __future__ import annotations

import os
import sys

from determined_lite.cli._common import format_value
from determined_lite.cli._table import Cut, Fit, cut_text, render_table
from determined_lite.store import Store
from tests.pty_helpers import run_in_pty

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cut_styles():
    assert cut_text("a-long-experiment-name", 10, Cut.END) == "a-long-ex…"
    assert cut_text("/home/u/.det-lite/checkpoints/abcd", 12, Cut.START) == "…points/abcd"
    assert cut_text("acc=0.9713 loss=0.08123 val=1.5", 20, Cut.ITEMS) == "acc=0.9713 …"
    assert cut_text("short", 10, Cut.ITEMS) == "short"


def test_a_table_is_cut_then_columns_left_out_and_numbers_are_whole():
    headers = ["ID", "Name", "Batches", "Path", "Time"]
    rows = [[12345, "x" * 40, 123456789, "/p/" + "q" * 40, "2026-11-27 12:00:00"]]
    text, dropped = render_table(headers, rows, 60, Fit(cut={"Name": Cut.END}, drop=("Time", "Path")))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert dropped == ["Time", "Path"] or dropped == ["Time"]
    assert "12345" in lines[2] and "123456789" in lines[2]
    whole, none_dropped = render_table(headers, rows, None, Fit(cut={"Name": Cut.END}, drop=("Time",)))
    assert none_dropped == [] and "x" * 40 in whole and "q" * 40 in whole


def test_long_and_nested_lists_show_their_shape():
    assert format_value([[1, 2, 3]] * 10) == "[10x3]"
    assert format_value(list(range(100))) == "[100]"
    assert format_value([1, 2]) == "[1,2]"


def _fill(home) -> None:
    os.environ["DET_LITE_HOME"] = str(home)
    store = Store()
    for i in range(3):
        exp = store.experiments.create(
            {"name": f"a-rather-long-experiment-name-{i}", "searcher": {"name": "grid"}},
            "/ctx",
            "/ctx/e.yaml",
        )
        trial = store.trials.create(exp, 0, {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}, 1)
        path = os.path.join(str(home), "checkpoints", f"{i}" * 32)
        store.checkpoints.add(trial, f"{i}" * 32, path, 20, {"loss": 0.125, "accuracy": 0.96875})
        store.metrics.add_validation(trial, 20, {"loss": 0.125, "confusion": [[1, 0], [0, 1]] * 5})
        store.trials.update(trial, best_validation=0.125)
    store.close()


def test_list_describe_and_checkpoints_fit_80_columns(_det_lite_home):
    _fill(_det_lite_home)
    env = dict(os.environ, DET_LITE_HOME=str(_det_lite_home), PYTHONPATH=REPO)
    for args in (
        ["experiment", "list"],
        ["experiment", "describe", "1"],
        ["trial", "describe", "1"],
        ["checkpoint", "list"],
    ):
        run = run_in_pty([sys.executable, "-m", "determined_lite.cli", *args], width=80, env=env, cwd=REPO)
        assert run.returncode == 0, run.raw
        lines = run.raw.replace("\r\n", "\n").splitlines()
        assert max(len(line) for line in lines) <= 80, (args, run.raw)
        assert "0.125" in run.raw or args == ["experiment", "list"]  # the searcher metric stays
        assert "[[1,0]" not in run.raw  # a confusion matrix is its shape, [10x2]
    listing = run_in_pty(
        [sys.executable, "-m", "determined_lite.cli", "checkpoint", "list"], width=200, env=env, cwd=REPO
    )
    assert "0" * 32 in listing.raw  # a wide terminal shows the whole uuid


def test_list_commands_offer_csv(_det_lite_home):
    import csv
    import io

    from click.testing import CliRunner

    from determined_lite.cli import cli

    _fill(_det_lite_home)
    out = CliRunner().invoke(cli, ["experiment", "list", "--csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["Name"] for r in rows] == [f"a-rather-long-experiment-name-{i}" for i in range(3)]
    out = CliRunner().invoke(cli, ["checkpoint", "list", "--csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["UUID"] == "0" * 32
    assert rows[0]["Validation Metrics"] == '{"accuracy": 0.96875, "loss": 0.125}'
    both = CliRunner().invoke(cli, ["checkpoint", "list", "--csv", "--json"])
    assert both.exit_code == 2
