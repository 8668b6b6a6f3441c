"""What the dashboard reads out of an experiment's searcher: its metric, its progress, ASHA's rungs.

The runner saves ``{"searcher": SearchMethod.state_dict(), ...}`` in the store after every
event; progress is that searcher rebuilt (``make_searcher`` + ``load_state_dict``) and asked,
as Determined's web UI showed it. A config or state this code cannot rebuild gives ``None``
(the page shows "-"), never an error.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from determined_lite.config import ConfigError
from determined_lite.searcher import make_searcher

DEFAULT_METRIC = "validation_loss"


def searcher_metric(config: Any) -> Tuple[Optional[str], bool]:
    """``(searcher.metric, searcher.smaller_is_better)`` of a stored config."""
    searcher = config.get("searcher") if isinstance(config, dict) else None
    if not isinstance(searcher, dict):
        return None, True
    metric = searcher.get("metric")
    return (str(metric) if metric is not None else None), bool(searcher.get("smaller_is_better", True))


def progress(config: Any, saved: Optional[Mapping[str, Any]]) -> Optional[float]:
    """Fraction of the search done (0..1), from the last saved searcher state; None when unknown."""
    if not isinstance(config, dict) or not isinstance(saved, Mapping) or "searcher" not in saved:
        return None
    seed = int((config.get("reproducibility") or {}).get("experiment_seed") or 0)
    try:
        searcher = make_searcher(config.get("searcher") or {}, config.get("hyperparameters") or {}, seed)
        searcher.load_state_dict(saved["searcher"])
        return float(searcher.progress())
    except (ConfigError, ValueError, KeyError, TypeError):
        return None


def _rung_rows(
    saved_rung: Mapping[str, Any],
    closed: set,
    trial_of: Mapping[str, int],
    smaller_is_better: bool,
    last: bool,
) -> List[Dict[str, Any]]:
    rows = []
    for request_id, metric, promoted in saved_rung.get("metrics", []):
        rows.append(
            {
                "trial_id": trial_of.get(str(request_id)),
                "request_id": request_id,
                "metric": metric if smaller_is_better else -metric,  # ASHA ranks smaller-is-better
                "promoted": bool(promoted),
                # a trial closed in the last rung finished its length: it was not stopped
                "stopped": not last and not promoted and str(request_id) in closed,
            }
        )
    return rows


def rungs(
    saved: Optional[Mapping[str, Any]], trial_of: Mapping[str, int], smaller_is_better: bool
) -> Optional[List[Dict[str, Any]]]:
    """adaptive_asha's rungs, or None for other searchers: ``[{"bracket", "rung", "length",
    "trials": [{"trial_id", "request_id", "metric", "promoted", "stopped"}]}]``, best first in
    each rung; ``stopped``: the searcher closed it there (it will not be promoted)."""
    state = saved.get("searcher") if isinstance(saved, Mapping) else None
    if not isinstance(state, Mapping) or state.get("searcher") != "adaptive_asha":
        return None
    try:
        plans = state["plan"]["brackets"]
        brackets = state["search"]["brackets"]
        out = []
        for b, (plan, bracket) in enumerate(zip(plans, brackets)):
            closed = {str(r) for r in bracket.get("closed", [])}
            last = len(plan["rung_lengths"]) - 1
            for i, (length, saved_rung) in enumerate(zip(plan["rung_lengths"], bracket["rungs"])):
                rows = _rung_rows(saved_rung, closed, trial_of, smaller_is_better, i == last)
                out.append({"bracket": b, "rung": i, "length": length, "trials": rows})
        return out
    except (KeyError, TypeError, ValueError):
        return None
