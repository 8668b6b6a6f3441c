"""What det-lite draws on a terminal: numbers rounded for reading, progress bars that fit the
width, and a board of bars at the bottom of the screen with lines written above them.

Standard library only (the runner and the CLI use it without torch). Bars are drawn with
carriage returns and, for more than one bar, the ANSI cursor-up and erase-line sequences every
terminal emulator understands; where output is not a terminal but a notebook, one bar is
redrawn with carriage returns alone.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

DEFAULT_WIDTH = 100
MAX_BAR_WIDTH = 40
MIN_BAR_WIDTH = 6
_EIGHTHS = " ▏▎▍▌▋▊▉"
_FULL = "█"
ELLIPSIS = "…"


def format_number(value: Any, digits: int = 4) -> str:
    """A metric or hyperparameter for reading: ``digits`` significant digits (0.9750 → 0.975,
    5.10849e-05 → 5.108e-05, 12345.6 → 12346); ints, bools and strings as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if 10**digits <= abs(value) < 1e15:
            return f"{value:.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def format_duration(seconds: float) -> str:
    """``00:07``, ``12:03``, ``1:02:03`` (as tqdm and Lightning show times)."""
    total = int(max(0.0, seconds) + 0.5)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_rate(batches_per_s: float) -> str:
    """``72.8 batch/s``, ``3021 batch/s``; below one batch a second, ``2.5 s/batch``."""
    if batches_per_s >= 100:
        return f"{batches_per_s:.0f} batch/s"
    if batches_per_s >= 1:
        return f"{batches_per_s:.3g} batch/s"
    return f"{1 / batches_per_s:.3g} s/batch"


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def _bar(fraction: float, width: int) -> str:
    fraction = min(1.0, max(0.0, fraction))
    eighths = int(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = _FULL * full + (_EIGHTHS[part] if part and full < width else "")
    return text.ljust(width)


def bar_line(label: str, done: int, total: Optional[int], width: int, stats: Sequence[str] = ()) -> str:
    """``trial 3 lr=0.01:  45%|████▌     | 45/100 [00:02<00:03, 17.9 batch/s, loss=0.123]``.

    Never wider than ``width``: the bar shrinks first, then goes, then the label is cut (to its
    first two words, ``trial 12``), then the end of the line.
    Without a ``total`` (not known yet), the counts alone.
    """
    tail = f" [{', '.join(stats)}]" if stats else ""
    if not total:
        return fit(f"{label}: {done} batches{tail}", width)
    percent = f"{int(100 * min(done, total) / total):3d}%"
    counts = f" {done}/{total}{tail}"
    head = f"{label}: {percent}"
    room = width - len(head) - len(counts) - 2  # the two "|" around the bar
    if room >= MIN_BAR_WIDTH:
        bar_width = min(room, MAX_BAR_WIDTH)
        return f"{head}|{_bar(done / total, bar_width)}|{counts}"
    plain = f"{percent}{counts}"
    # The label's first two words (``trial 12``) stay; the rest of it, then the stats, give way.
    keep = len(" ".join(label.split(" ")[:2]))
    return fit(f"{fit(label, max(keep + 1, width - len(plain) - 2))}: {plain}", width)


def terminal_width(out: TextIO) -> int:
    """The width of the terminal ``out`` writes to (``$COLUMNS``, else 100 when it has none)."""
    try:
        return os.get_terminal_size(out.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def in_notebook() -> bool:
    """Whether this process is a Jupyter/IPython kernel (its stdout is no terminal, yet shown live)."""
    import sys

    return "ipykernel" in sys.modules


class BarBoard:
    """Progress bars kept at the bottom of ``out``, one per key, with lines written above them.

    ``update(key, render)`` sets what a bar shows (``render(width) -> line``); ``refresh()``
    redraws at most every ``interval_s``; ``write(line)`` prints a line above the bars;
    ``remove(key, keep=True)`` leaves the bar's last line on the screen. ``enabled=False``: no
    bars, lines are printed as they come. Thread-safe.
    """

    def __init__(self, out: TextIO, *, enabled: bool, interval_s: float = 0.1) -> None:
        self.out = out
        self.enabled = enabled
        isatty = getattr(out, "isatty", None)
        # Several bars need cursor movement: a terminal. A notebook gets one bar, redrawn with \r.
        self.ansi = bool(isatty and isatty())
        self.interval_s = interval_s
        self._renders: Dict[Any, Callable[[int], str]] = {}
        self._drawn: List[str] = []  # the bar lines now on the screen
        self._last_draw = -math.inf
        self._lock = threading.RLock()

    def update(self, key: Any, render: Callable[[int], str]) -> None:
        with self._lock:
            self._renders[key] = render

    def remove(self, key: Any, keep: bool = True) -> None:
        """Drop ``key``'s bar; with ``keep``, its last state stays on the screen as a line."""
        with self._lock:
            render = self._renders.pop(key, None)
            if render is None or not self.enabled:
                return
            line = render(self._width()) if keep else None
            self._clear()
            if line is not None:
                self.out.write(line + "\n")
            self._draw()

    def write(self, line: str) -> None:
        """Print ``line`` above the bars."""
        with self._lock:
            self._clear()
            self.out.write(line + "\n")
            self._draw()

    def refresh(self, force: bool = False) -> None:
        with self._lock:
            if not self.enabled or not self._renders:
                return
            now = time.monotonic()
            if not force and now - self._last_draw < self.interval_s:
                return
            self._clear()
            self._draw()

    def close(self) -> None:
        """Leave every bar's last state on the screen and stop drawing."""
        with self._lock:
            for key in list(self._renders):
                self.remove(key)
            self.out.flush()

    def _width(self) -> int:
        # One column short of the edge: writing the last column makes some terminals wrap.
        return max(20, terminal_width(self.out) - 1)

    def _clear(self) -> None:
        if not self._drawn:
            return
        if self.ansi:
            self.out.write("\r\x1b[K" + "\x1b[A\x1b[K" * (len(self._drawn) - 1))
        else:
            self.out.write("\r" + " " * len(self._drawn[0]) + "\r")
        self._drawn = []

    def _draw(self) -> None:
        if self.enabled and self._renders:
            width = self._width()
            renders = list(self._renders.values())
            if not self.ansi:
                renders = renders[:1]
            self._drawn = [fit(render(width), width) for render in renders]
            self.out.write("\n".join(self._drawn))
            self._last_draw = time.monotonic()
        self.out.flush()
