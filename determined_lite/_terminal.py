"""What det-lite draws on a terminal: numbers rounded for reading, progress bars that fit the
width, and a board of bars at the bottom of the screen with lines written above them.

tqdm draws the bars and keeps them in place (carriage returns, and for more than one bar the
cursor-up sequence every terminal emulator understands; where output is not a terminal but a
notebook, one bar redrawn with carriage returns). It is imported on first use only: the runner
and the CLI draw bars, trial workers import this module for its number formats alone and never
load tqdm.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

DEFAULT_WIDTH = 100
MAX_BAR_WIDTH = 40
MIN_BAR_WIDTH = 6
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


@functools.lru_cache(maxsize=None)
def _tqdm() -> Any:
    """The tqdm class the board draws with, imported on first use: only a process that draws
    bars (the CLI, a plain-Python ``Trainer.fit``) loads tqdm; trial workers import this module
    for its number formats alone."""
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no monitor thread: the board redraws its bars itself

        def moveto(self, n: int) -> None:
            """tqdm's move between bar rows, back to the row's start before moving up, so that a
            bar's text ends its line in the byte stream as it does on the screen."""
            self.fp.write("\n" * n + ("\r" + "\x1b[A" * -n if n < 0 else ""))
            self.fp.flush()

    return Bar


def bar_line(label: str, done: int, total: Optional[int], width: int, stats: Sequence[str] = ()) -> str:
    """``trial 3 lr=0.01:  45%|████▌     | 45/100 [00:02<00:03, 17.9 batch/s, loss=0.123]``.

    tqdm draws the bar. Never wider than ``width``, and never a value cut in half: the bar
    shrinks first, then goes; then the ``stats`` go from the first (times, rate, loss: the last,
    the searcher metric, stays longest); then the label's words go from the last, whole
    (``trial 12 lr=0.01 …``: its first two, the trial, stay); only then is the line cut.
    Without a ``total`` (not known yet), the counts alone.
    """
    stats = list(stats)
    words = label.split(" ")
    labels = [label] + [" ".join([*words[:k], ELLIPSIS]) for k in range(len(words) - 1, 1, -1)]
    attempts = [(label, stats[i:]) for i in range(max(1, len(stats)))]
    attempts += [(shorter, stats[-1:]) for shorter in labels[1:]] + [(labels[-1], [])]
    for text, kept in attempts:
        # A bar only beside the whole label: a hyperparameter tells more than the bar.
        line = _bar_line_within(text, done, total, width, kept, bar=text == label)
        if line is not None:
            return line
    return fit(f"{labels[-1]}: {done}/{total}" if total else f"{labels[-1]}: {done} batches", width)


def _bar_line_within(
    label: str, done: int, total: Optional[int], width: int, stats: Sequence[str], bar: bool
) -> Optional[str]:
    """The line with this label and these stats, a bar if there is room for one (at most
    ``MAX_BAR_WIDTH``), else the counts alone; None when even that is wider than ``width``."""
    tail = f" [{', '.join(stats)}]" if stats else ""
    if not total:
        line = f"{label}: {done} batches{tail}"
        return line if len(line) <= width else None
    percent = f"{100 * min(done, total) / total:3.0f}%"
    counts = f" {done}/{total}{tail}"
    fixed = len(label) + 2 + len(percent) + len(counts) + 2  # ": " and the two "|" around the bar
    room = width - fixed
    if bar and room >= MIN_BAR_WIDTH:
        return str(
            _tqdm().format_meter(
                min(done, total),
                total,
                0,
                ncols=fixed + min(room, MAX_BAR_WIDTH),
                prefix=label,
                bar_format="{l_bar}{bar}|{counts}",
                counts=counts,
            )
        )
    line = f"{label}: {percent}{counts}"
    return line if len(line) <= width else None


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
    bars, lines are printed as they come (and tqdm is never imported). Thread-safe.

    tqdm keeps the bars in place: one tqdm line per key at a fixed position under the cursor,
    cleared and redrawn around every line written above them (``tqdm.write``). Several bars need
    cursor movement, a terminal; elsewhere (a notebook's stdout) only the first bar is shown,
    redrawn with carriage returns.
    """

    def __init__(self, out: TextIO, *, enabled: bool, interval_s: float = 0.1) -> None:
        self.out = out
        self.enabled = enabled
        isatty = getattr(out, "isatty", None)
        self.ansi = bool(isatty and isatty())
        self.interval_s = interval_s
        self._renders: Dict[Any, Callable[[int], str]] = {}
        self._bars: Dict[Any, Any] = {}  # key -> its tqdm line, once drawn
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
            bar = self._bars.pop(key, None)
            with _tqdm().external_write_mode(file=self.out):  # clears the bars, redraws them after
                if bar is not None:
                    bar.close()
                self._place()
                if keep:
                    self.out.write(fit(render(self._width()), self._width()) + "\n")
            self.refresh(force=True)

    def write(self, line: str) -> None:
        """Print ``line`` above the bars."""
        with self._lock:
            if self._bars:
                _tqdm().write(line, file=self.out)
            else:
                self.out.write(line + "\n")
            self.out.flush()

    def refresh(self, force: bool = False) -> None:
        with self._lock:
            if not self.enabled or not self._renders:
                return
            now = time.monotonic()
            if not force and now - self._last_draw < self.interval_s:
                return
            self._last_draw = now
            width = self._width()
            for key, render in self._shown():
                line = fit(render(width), width)
                bar = self._bars.get(key)
                if bar is None:
                    self._bars[key] = self._new_bar(len(self._bars), line, width)
                else:
                    bar.ncols = width
                    bar.set_description_str(line)
            self.out.flush()

    def close(self) -> None:
        """Leave every bar's last state on the screen and stop drawing."""
        with self._lock:
            for key in list(self._renders):
                self.remove(key)
            self.out.flush()

    def _shown(self) -> List[Tuple[Any, Callable[[int], str]]]:
        renders = list(self._renders.items())
        return renders if self.ansi else renders[:1]

    def _new_bar(self, position: int, line: str, width: int) -> Any:
        return _tqdm()(
            desc=line,
            file=self.out,
            position=position,
            leave=False,
            bar_format="{desc}",
            dynamic_ncols=False,
            ncols=width,
            mininterval=0,
            delay=0,
            disable=False,
        )

    def _place(self) -> None:
        """Number the remaining bars from the top again (tqdm's fixed positions are negative)."""
        for position, bar in enumerate(self._bars.values()):
            bar.pos = -position

    def _width(self) -> int:
        # One column short of the edge: writing the last column makes some terminals wrap.
        return max(20, terminal_width(self.out) - 1)
