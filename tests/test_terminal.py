"""What det-lite draws on a terminal: rounded numbers, bars that fit, a board of bars with lines above."""

from __future__ import annotations

import io

import pytest

from determined_lite._terminal import BarBoard, bar_line, format_duration, format_number, format_rate
from tests.pty_helpers import render


@pytest.mark.parametrize(
    "value, text",
    [
        (0.975, "0.975"),
        (0.9722222222, "0.9722"),
        (5.10849e-05, "5.108e-05"),
        (24.904512, "24.9"),
        (12345.6, "12346"),
        (3, "3"),
        (True, "true"),
        (None, ""),
        ("relu", "relu"),
        (float("nan"), "nan"),
    ],
)
def test_format_number_rounds_to_four_significant_digits(value, text):
    assert format_number(value) == text


def test_durations_and_rates():
    assert format_duration(7.4) == "00:07"
    assert format_duration(723) == "12:03"
    assert format_duration(3723) == "1:02:03"
    assert format_rate(72.84) == "72.8 batch/s"
    assert format_rate(3021.7) == "3022 batch/s"
    assert format_rate(0.4) == "2.5 s/batch"


def test_bar_line_fills_the_width_and_never_exceeds_it():
    line = bar_line("trial 3 lr=0.01", 45, 100, 80, ["00:02<00:03", "17.9 batch/s", "loss=0.123"])
    assert line.startswith("trial 3 lr=0.01:  45%|")
    assert line.endswith("| 45/100 [00:02<00:03, 17.9 batch/s, loss=0.123]")
    bar = line.split("|")[1]
    assert len(bar) == 80 - len(line.replace(bar, "")) and bar.count("█") == int(0.45 * len(bar))
    long_label = "trial 12 " + " ".join(f"hp{i}=0.001" for i in range(20))
    for width in range(20, 130, 7):
        fitted = bar_line(long_label, 3, 9, width, ["00:01<00:02", "3.1 batch/s", "loss=1.5"])
        assert len(fitted) <= width, (width, fitted)
        assert fitted.startswith("trial 12")
    # Too narrow for a bar: the label is cut, the numbers stay.
    narrow = bar_line(long_label, 3, 9, 40, [])
    assert narrow.endswith(" 33% 3/9") and "…" in narrow
    assert bar_line("trial 1", 5, None, 60) == "trial 1: 5 batches"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_board_keeps_bars_at_the_bottom_and_lines_above(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    out = _Tty()
    board = BarBoard(out, enabled=True, interval_s=0)
    board.update(1, lambda w: bar_line("trial 1", 1, 4, w))
    board.update(2, lambda w: bar_line("trial 2", 2, 4, w))
    board.refresh(force=True)
    board.write("[trial 1] batch 1 validation: loss=0.5")
    board.update(1, lambda w: bar_line("trial 1", 4, 4, w))
    board.refresh(force=True)
    board.remove(1)  # its last state stays, above the bars still running
    board.write("[trial 2] a line")
    screen = render(out.getvalue(), 60)
    assert screen[0] == "[trial 1] batch 1 validation: loss=0.5"
    assert screen[1].startswith("trial 1: 100%|") and screen[1].endswith("| 4/4")
    assert screen[2] == "[trial 2] a line"
    assert screen[3].startswith("trial 2:  50%|") and screen[3].endswith("| 2/4")
    assert len(screen) == 4 and all(len(line) < 60 for line in screen)
    board.close()
    assert render(out.getvalue(), 60) == screen  # trial 2's bar stays as it was


def test_disabled_board_prints_lines_only():
    out = _Tty()
    board = BarBoard(out, enabled=False)
    board.update(1, lambda w: "trial 1: bar")
    board.refresh(force=True)
    board.write("a line")
    board.close()
    assert out.getvalue() == "a line\n"


def test_notebook_board_redraws_one_bar_with_carriage_returns():
    out = io.StringIO()  # a notebook's stdout: not a terminal
    board = BarBoard(out, enabled=True, interval_s=0)
    board.update(1, lambda w: "trial 1: 50%")
    board.refresh(force=True)
    board.write("line")
    assert "\x1b[" not in out.getvalue()
    assert render(out.getvalue(), 100) == ["line", "trial 1: 50%"]


def test_bar_line_at_80_columns_cuts_no_label_word_and_no_value():
    """Issue 29.10: at 80 columns finished lines read ``trial 10 l…:`` and ``val_loss=0.…``.
    Whole stats go first (times, rate, loss), then whole hyperparameters; the metric stays."""
    label = "trial 10 lr=0.001 hidden_size=128 dropout=0.25 weight_decay=0.0001"
    stats = ["00:12<00:00", "72.8 batch/s", "loss=0.04131", "val_loss=0.03915"]
    for width in (79, 70, 60, 50):
        line = bar_line(label, 100, 100, width, stats)
        assert len(line) <= width, line
        assert line.endswith("val_loss=0.03915]"), line
        head = line.split(":")[0].split(" ")
        assert all(word in label.split(" ") or word == "…" for word in head), line
        assert line.startswith("trial 10 lr=0.001" if width >= 60 else "trial 10 "), line
    # With room, everything is shown.
    wide = bar_line(label, 100, 100, 200, stats)
    assert wide.startswith(label + ": 100%|") and wide.endswith("[" + ", ".join(stats) + "]")
