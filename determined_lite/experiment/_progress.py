"""What a foreground experiment shows: one progress bar per running trial, a summary at the end."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, TextIO


def _short(hparams: Dict[str, Any], width: int = 40) -> str:
    text = json.dumps(hparams, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


class Progress:
    """tqdm bars keyed by trial id; log lines are written above them."""

    def __init__(self, enabled: bool, out: TextIO) -> None:
        self.enabled = enabled
        self.out = out
        self._bars: Dict[int, Any] = {}
        self._positions: Dict[int, int] = {}

    def start(self, trial_id: int, hparams: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        used = set(self._positions.values())
        position = next(i for i in range(len(used) + 1) if i not in used)
        self._positions[trial_id] = position
        self._bars[trial_id] = tqdm(
            total=None,
            desc=f"trial {trial_id}",
            unit="batch",
            position=position,
            leave=False,
            file=self.out,
            dynamic_ncols=True,
            postfix=_short(hparams),
        )

    def update(self, trial_id: int, progress: Optional[Dict[str, Any]]) -> None:
        bar = self._bars.get(trial_id)
        if bar is None or not progress:
            return
        if progress.get("max_batches") and bar.total != progress["max_batches"]:
            bar.total = progress["max_batches"]
        done = progress.get("total_batches") or 0
        if done != bar.n:
            bar.n = done
            bar.refresh()

    def stop(self, trial_id: int) -> None:
        bar = self._bars.pop(trial_id, None)
        self._positions.pop(trial_id, None)
        if bar is not None:
            bar.close()

    def write(self, line: str) -> None:
        if self.enabled and self._bars:
            from tqdm import tqdm

            tqdm.write(line, file=self.out)
        else:
            self.out.write(line + "\n")
            self.out.flush()

    def close(self) -> None:
        for trial_id in list(self._bars):
            self.stop(trial_id)

    @staticmethod
    def summary(description: Dict[str, Any], metric: str) -> str:
        """Trial, state, hparams, best searcher metric and its kept checkpoint, as a table."""
        rows: List[List[str]] = [["trial", "state", "batches", f"best {metric}", "checkpoint", "hparams"]]
        for t in description["trials"]:
            best = t.get("best_validation")
            kept = sorted(t.get("checkpoints") or [], key=lambda c: c["total_batches"])
            rows.append(
                [
                    str(t["id"]),
                    t["state"],
                    str(t.get("total_batches", 0)),
                    "" if best is None else f"{best:.6g}",
                    kept[-1]["uuid"] if kept else "",
                    json.dumps(t["hparams"], sort_keys=True),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = []
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        return "\n".join(lines)
