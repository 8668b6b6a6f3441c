"""What the dashboard reads out of an experiment's searcher: its metric, its progress, its rungs.

The runner saves ``{"searcher": SearchMethod.state_dict(), ...}`` in the store after every
event; progress is that searcher rebuilt (``make_searcher`` + ``load_state_dict``) and asked,
as Determined's web UI showed it; rungs are the saved state read by the searcher that saved
it (``searcher.saved_rungs``). A config or state this code cannot rebuild gives ``None``
(the page shows "-"), never an error.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from determined_lite.config import ConfigError
from determined_lite.searcher import make_searcher, saved_rungs

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


def rungs(
    saved: Optional[Mapping[str, Any]], trial_of: Mapping[str, int], smaller_is_better: bool
) -> Optional[List[Dict[str, Any]]]:
    """The searcher's rungs (``searcher.saved_rungs``: adaptive_asha's), or None for a searcher
    without: ``[{"bracket", "rung", "length", "trials": [{"trial_id", "request_id", "metric",
    "promoted", "stopped"}]}]``, best first in each rung; ``stopped``: the searcher closed it
    there (it will not be promoted)."""
    state = saved.get("searcher") if isinstance(saved, Mapping) else None
    if not isinstance(state, Mapping):
        return None
    try:
        found = saved_rungs(state, smaller_is_better)
    except (KeyError, TypeError, ValueError):
        return None
    if found is None:
        return None
    return [
        {
            "bracket": rung.bracket,
            "rung": rung.index,
            "length": rung.length,
            "trials": [
                {
                    "trial_id": trial_of.get(str(report.request_id)),
                    "request_id": report.request_id,
                    "metric": report.metric,
                    "promoted": report.promoted,
                    "stopped": report.stopped,
                }
                for report in rung.reports
            ],
        }
        for rung in found
    ]
