"""Text tables that fit the terminal: the CLI's one table renderer.

A table is as wide as its content when stdout is not a terminal (pipes and files get every
column whole; ``--json`` and ``--csv`` are the forms for programs) unless ``COLUMNS`` is set
(``COLUMNS=80 det-lite e list | less``: that width, as on a terminal). On a terminal it fits
the terminal's width: first the columns a table names as cuttable are cut (a
name at its end, a path at its start, ``k=v`` lists between whole items, never inside a
number), then the least useful columns are left out, and one line on stderr says which.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import shutil
import sys
from typing import IO, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import click

from determined_lite.cli._common import format_value

ELLIPSIS = "…"
MIN_CUT_WIDTH = 10


class Cut:
    """How a cuttable column loses characters."""

    END = "end"  # names: "a-long-na…"
    START = "start"  # paths: "…/ckpts/abc"
    ITEMS = "items"  # "k=v k=v" lists: whole items only, "acc=0.97 …"


@dataclasses.dataclass(frozen=True)
class Fit:
    """What a table may give up to fit the terminal: ``cut`` columns (in the order to cut) and
    then ``drop`` columns (least useful first)."""

    cut: Mapping[str, str] = dataclasses.field(default_factory=dict)
    drop: Sequence[str] = ()


def terminal_width() -> Optional[int]:
    """The width to fit: ``COLUMNS`` when it is a positive number (piped output too), else the
    terminal's; None when stdout is no terminal and ``COLUMNS`` is not set."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def cut_text(text: str, width: int, how: str) -> str:
    """``text`` in at most ``width`` characters, marked with an ellipsis where it was cut."""
    if len(text) <= width:
        return text
    if how == Cut.START:
        return ELLIPSIS + text[len(text) - width + 1 :]
    if how == Cut.ITEMS:
        kept = ""
        for item in text.split(" "):
            candidate = f"{kept} {item}" if kept else item
            if len(candidate) + 2 > width:
                break
            kept = candidate
        if kept:
            return f"{kept} {ELLIPSIS}"
    return text[: width - 1] + ELLIPSIS


def _total(widths: Mapping[int, int]) -> int:
    return 2 + sum(widths.values()) + 3 * (len(widths) - 1)  # the rule line: "-" both ends


def _cut_to(widths: Dict[int, int], cuts: Sequence[Tuple[int, int]], width: int) -> Dict[int, int]:
    """``widths`` with the cuttable columns (index, floor), in order, narrowed as far as needed."""
    widths = dict(widths)
    for i, floor in cuts:
        over = _total(widths) - width
        if over <= 0:
            break
        if i in widths:
            widths[i] = max(min(floor, widths[i]), widths[i] - over)
    return widths


def fit_columns(
    headers: Sequence[str], natural: Mapping[int, int], width: int, fit: Fit
) -> Tuple[Dict[int, int], List[str]]:
    """The columns kept (index -> width) and the headers left out, so a table of ``natural``
    column widths (index -> its widest cell or header) fits ``width``: cut columns first; when
    cutting all of them is not enough, leave out columns (least useful first) and cut what
    remains only as far as needed."""
    natural = dict(natural)
    index = {h: i for i, h in enumerate(headers)}
    cuts = [(index[h], max(MIN_CUT_WIDTH, len(h))) for h in fit.cut if h in index]
    dropped: List[str] = []
    for name in fit.drop:
        if _total(_cut_to(natural, cuts, width)) <= width or len(natural) == 1:
            break
        if index.get(name) in natural:
            del natural[index[name]]
            dropped.append(name)
    return _cut_to(natural, cuts, width), dropped


Chunks = Callable[[], Iterable[Sequence[Sequence[Any]]]]


class _Layout:
    """Column widths and alignment of a table, from one pass over its rows; then its lines."""

    def __init__(self, headers: Sequence[str], chunks: Chunks, width: Optional[int], fit: Fit) -> None:
        natural = {i: len(h) for i, h in enumerate(headers)}
        kinds: List[set] = [set() for _ in headers]
        rows = 0
        for chunk in chunks():
            rows += len(chunk)
            for i in natural:
                kinds[i].update(type(row[i]) for row in chunk)
                natural[i] = max(natural[i], max((len(_text(row[i])) for row in chunk), default=0))
        numeric = [bool(rows) and all(_is_number_type(t) for t in k - {type(None)}) for k in kinds]
        self.headers, self.widths = headers, natural
        self.dropped: List[str] = []
        if width is not None:
            self.widths, self.dropped = fit_columns(headers, natural, width, fit)
        self.how = {i: fit.cut.get(h, Cut.END) for i, h in enumerate(headers)}
        self.cut = [i for i, w in self.widths.items() if w < natural[i]]
        # Cells of uncut columns all fit: one format call per row; cut columns go through cut_text.
        self.template = " " + " | ".join(
            f"{{{i}:{'>' if numeric[i] else '<'}{w}}}" for i, w in self.widths.items()
        )

    def head(self) -> List[str]:
        widths, how = self.widths, self.how
        names = [cut_text(self.headers[i], w, how[i]).ljust(w) for i, w in widths.items()]
        return [" " + " | ".join(names).rstrip(), "-" + "-+-".join("-" * w for w in widths.values()) + "-"]

    def line(self, row: Sequence[Any]) -> str:
        values = [_text(v) for v in row]
        for i in self.cut:
            values[i] = cut_text(values[i], self.widths[i], self.how[i])
        return self.template.format(*values).rstrip()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else format_value(value)


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    width: Optional[int] = None,
    fit: Fit = Fit(),
) -> Tuple[str, List[str]]:
    """A plain-text table (`` a | b`` header, ``---+---`` rule, numbers right-aligned) fitted to
    ``width`` (None: no limit), and the headers left out to fit."""
    layout = _Layout(headers, lambda: [rows], width, fit)
    return "\n".join(layout.head() + [layout.line(row) for row in rows]), layout.dropped


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], fit: Fit = Fit()) -> None:
    """Print a table fitted to the terminal; say on stderr which columns were left out."""
    echo_chunks(headers, lambda: [rows], fit)


def echo_chunks(headers: Sequence[str], chunks: Chunks, fit: Fit = Fit()) -> None:
    """``echo_table`` of rows that come in chunks, read twice (widths, then lines): a table of
    any length in the memory of its largest chunk."""
    width = terminal_width()
    layout = _Layout(headers, chunks, width, fit)
    click.echo("\n".join(layout.head()))
    for chunk in chunks():
        if chunk:
            click.echo("\n".join(layout.line(row) for row in chunk))
    if layout.dropped and width is not None:
        note = f"(not shown: {', '.join(layout.dropped)}; --json or --csv has every column)"
        click.echo(cut_text(note, width - 1, Cut.END), err=True)


def _is_number_type(kind: type) -> bool:
    return issubclass(kind, (int, float)) and not issubclass(kind, bool)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def csv_text(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The rows as CSV with a header line: full precision, mappings and lists as JSON."""
    out = io.StringIO()
    write_csv(out, headers, [rows])
    return out.getvalue()


def write_csv(out: IO[str], headers: Sequence[str], chunks: Iterable[Sequence[Sequence[Any]]]) -> None:
    """``csv_text`` of rows that come in chunks, written to ``out`` a chunk at a time."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    for chunk in chunks:
        writer.writerows([[_csv_cell(v) for v in row] for row in chunk])


def echo_rows(headers: Sequence[str], rows: Sequence[Sequence[Any]], fit: Fit, as_csv: bool) -> None:
    """A list command's output: CSV (``--csv``) or a table fitted to the terminal."""
    if as_csv:
        click.echo(csv_text(headers, rows), nl=False)
    else:
        echo_table(headers, rows, fit)
