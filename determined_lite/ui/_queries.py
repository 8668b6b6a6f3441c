"""The dashboard's JSON documents, read from the store (opened read-only by the server).

Each function answers one ``GET /api/...`` URL (``_server.py`` routes them; docs/design.md has
the contract). Non-finite numbers become ``null`` when the server encodes the answer.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from determined_lite.config import searched_paths
from determined_lite.store import (
    TERMINAL_STATES,
    NotFoundError,
    Store,
    experiment_display_state,
    trial_display_state,
)
from determined_lite.ui import _downsample
from determined_lite.ui._actions import available_actions
from determined_lite.ui._curves import CurveCache, default_points
from determined_lite.ui._searcher import progress, rungs, searcher_metric

LOG_TAIL = 200
MAX_COMPARED = 20
MAX_LOG_LINES = 5000


class QueryError(ValueError):
    """A request the API cannot answer as asked (bad parameter): HTTP 400."""


def _lookup(hparams: Dict[str, Any], path: Sequence[str]) -> Any:
    value: Any = hparams
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _best(values: Sequence[Optional[float]], smaller_is_better: bool) -> Optional[float]:
    found = [v for v in values if v is not None]
    if not found:
        return None
    return min(found) if smaller_is_better else max(found)


class Queries:
    """The read side of the dashboard over ``store``; remembers the progress of ended experiments
    (it cannot change) so that the live list stays cheap."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.curve_cache = CurveCache(store)
        self._ended_progress: Dict[int, Optional[float]] = {}
        self._lock = threading.Lock()

    # --- experiments -----------------------------------------------------------------------------

    def _progress(self, exp: Dict[str, Any]) -> Optional[float]:
        ended = exp["state"] in TERMINAL_STATES
        with self._lock:
            if ended and exp["id"] in self._ended_progress:
                return self._ended_progress[exp["id"]]
        value = progress(exp["config"], self.store.experiments.load_searcher_state(exp["id"]))
        if ended:
            with self._lock:
                self._ended_progress[exp["id"]] = value
        return value

    def experiments(self, state: str = "", name: str = "") -> Dict[str, Any]:
        """``{"experiments": [...]}``, newest first, filtered by state (exact) and name (substring,
        any case)."""
        rows = []
        for exp in reversed(self.store.experiments.list(with_config=True)):
            if state and exp["state"] != state:
                continue
            if name and name.lower() not in str(exp["name"] or "").lower():
                continue
            metric, smaller = searcher_metric(exp["config"])
            trials = self.store.trials.list(exp["id"])
            rows.append(
                {
                    **{k: exp[k] for k in ("id", "name", "kind", "state", "running", "requested_action")},
                    **{k: exp[k] for k in ("created_at", "ended_at", "num_trials")},
                    "display_state": experiment_display_state(exp),
                    "actions": available_actions(exp),
                    "progress": self._progress(exp),
                    "metric": metric,
                    "smaller_is_better": smaller,
                    "best_metric": _best([t["best_validation"] for t in trials], smaller),
                }
            )
        return {"experiments": rows}

    def _experiment(self, experiment_id: int) -> Dict[str, Any]:
        exp = self.store.experiments.get(experiment_id)
        if exp is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        return exp

    def experiment(self, experiment_id: int) -> Dict[str, Any]:
        """Everything the experiment page shows but its curves and logs."""
        exp = self._experiment(experiment_id)
        config = exp["config"] if isinstance(exp["config"], dict) else {}
        metric, smaller = searcher_metric(config)
        varying = [".".join(p) for p in searched_paths(config.get("hyperparameters") or {})]
        runs = self.store.trials.runs(experiment_id)
        listed = self.store.trials.list(experiment_id)
        trials = [self._trial_row(t, varying, runs.get(t["id"], [])) for t in listed]
        state = self.store.experiments.load_searcher_state(experiment_id)
        checkpoints = [self._checkpoint(c) for c in self.store.checkpoints.list(experiment_id=experiment_id)]
        head = {k: v for k, v in exp.items() if k != "config"}
        return {
            "experiment": {
                **head,
                **(self.store.experiments.annotations(experiment_id) or {}),
                "display_state": experiment_display_state(exp),
                "actions": available_actions(exp),
                "progress": self._progress(exp),
                "metric": metric,
                "smaller_is_better": smaller,
            },
            "config_yaml": yaml.safe_dump(config, sort_keys=False, default_flow_style=False),
            "varying": varying,
            "hparam_types": {name: _hparam_type(config, name) for name in varying},
            "trials": trials,
            "metrics": self.store.metrics.names([t["id"] for t in trials]),
            "checkpoints": checkpoints,
            "rungs": rungs(state, {str(t["request_id"]): t["id"] for t in trials}, smaller),
        }

    def _trial_row(
        self, trial: Dict[str, Any], varying: Sequence[str], runs: Sequence[Dict[str, Any]]
    ) -> Dict[str, Any]:
        return {
            **{k: trial[k] for k in ("id", "request_id", "state", "total_batches", "restarts", "seed")},
            **{k: trial[k] for k in ("best_validation", "latest_checkpoint", "created_at", "ended_at")},
            "display_state": trial_display_state(trial),
            "actions": [] if trial["state"] in TERMINAL_STATES else ["kill"],
            "hparams": trial["hparams"],
            "varying": {name: _lookup(trial["hparams"], name.split(".")) for name in varying},
            "where": _where(runs),
            "runs": list(runs),
        }

    @staticmethod
    def _checkpoint(ckpt: Dict[str, Any]) -> Dict[str, Any]:
        row = {
            k: ckpt[k]
            for k in ("uuid", "trial_id", "total_batches", "metrics", "state", "created_at", "path")
        }
        row["size"] = _size(ckpt["path"])
        return row

    # --- trials ----------------------------------------------------------------------------------

    def trial(self, trial_id: int) -> Dict[str, Any]:
        """The trial page: its row, hyperparameters, checkpoints and metric names."""
        trial = self.store.trials.get(trial_id)
        if trial is None:
            raise NotFoundError(f"trial {trial_id} not found")
        exp = self._experiment(trial["experiment_id"])
        config = exp["config"] if isinstance(exp["config"], dict) else {}
        varying = [".".join(p) for p in searched_paths(config.get("hyperparameters") or {})]
        metric, smaller = searcher_metric(config)
        return {
            "trial": self._trial_row(trial, varying, self.store.trials.runs(exp["id"]).get(trial_id, [])),
            "experiment": {"id": exp["id"], "name": exp["name"], "state": exp["state"]},
            "metric": metric,
            "smaller_is_better": smaller,
            "metrics": self.store.metrics.names([trial_id]),
            "checkpoints": [self._checkpoint(c) for c in self.store.checkpoints.list(trial_id=trial_id)],
        }

    def compare(self, trial_ids: Sequence[int]) -> Dict[str, Any]:
        """Trials side by side: ``{"trials": [{"trial", "experiment", "metric", "smaller_is_better",
        "best": {"total_batches", "metrics"} | None}], "metrics", "hparams": [names]}``; ``best``:
        the validation with the best searcher metric, all its metrics."""
        if not 1 <= len(trial_ids) <= MAX_COMPARED:
            raise QueryError(f"compare 1 to {MAX_COMPARED} trials")
        rows, names = [], set()
        for trial_id in trial_ids:
            doc = self.trial(trial_id)
            metric, smaller = doc["metric"], doc["smaller_is_better"]
            scored = [v for v in self.store.metrics.validation(trial_id) if _number(v["metrics"].get(metric))]
            best = (min if smaller else max)(scored, key=lambda v: v["metrics"][metric]) if scored else None
            names.update(_flat_names(doc["trial"]["hparams"]))
            keep = ("trial", "experiment", "metric", "smaller_is_better")
            rows.append({**{k: doc[k] for k in keep}, "best": best})
        return {
            "trials": rows,
            "metrics": self.store.metrics.names(list(trial_ids)),
            "hparams": sorted(names),
        }

    def models(self) -> Dict[str, Any]:
        """The model registry: ``{"models": [{... as store.models.list, "versions": [{... as
        list_versions, "checkpoint": {"trial_id", "experiment_id", "total_batches", "metrics"}
        | None}]}]}``, versions newest first."""
        out = []
        for model in self.store.models.list():
            versions = []
            for version in self.store.models.list_versions(model["name"]):
                found = self.store.checkpoints.get(version["checkpoint_uuid"])
                keep = ("trial_id", "experiment_id", "total_batches", "metrics")
                versions.append({**version, "checkpoint": {k: found[k] for k in keep} if found else None})
            out.append({**model, "versions": versions})
        return {"models": out}

    # --- curves and logs -------------------------------------------------------------------------

    def curves(self, trial_ids: Sequence[int], kind: str, metric: str, points: int = 0) -> Dict[str, Any]:
        """``{"kind", "metric", "width", "series": [{"trial_id", "x", "y", "rows"}]}``: about
        ``points`` buckets per trial (0: as many as suit a chart of that many trials), each
        bucket's minimum and maximum kept."""
        if kind not in ("training", "validation"):
            raise QueryError("kind must be training or validation")
        if not metric:
            raise QueryError("metric is required")
        trials = [t for t in map(self.store.trials.get, trial_ids) if t is not None]
        points = min(points, _downsample.MAX_POINTS) if points > 0 else default_points(len(trials))
        width, buckets = self.curve_cache.buckets(trials, kind, metric, points)
        ids = [t["id"] for t in trials]
        series = _downsample.curves(buckets, ids, self.store.metrics.last(ids, kind, metric))
        return {"kind": kind, "metric": metric, "width": width, "series": series}

    def experiment_curves(
        self, experiment_id: int, kind: str, metric: str, points: int = 0
    ) -> Dict[str, Any]:
        self._experiment(experiment_id)
        return self.curves([t["id"] for t in self.store.trials.list(experiment_id)], kind, metric, points)

    def logs(self, where: Tuple[str, int], tail: Optional[int], search: str) -> Dict[str, Any]:
        """``{"lines": [{"id", "trial_id", "rank", "line", "time"}], "total"?}``: the last ``tail``
        lines, or with ``search`` the last matching ones (substring, any case)."""
        key, ident = where
        if key == "experiment_id":
            self._experiment(ident)
        elif self.store.trials.get(ident) is None:
            raise NotFoundError(f"trial {ident} not found")
        keep = min(tail or LOG_TAIL, MAX_LOG_LINES)
        if not search:
            return {"lines": self.store.logs.list(**{key: ident}, tail=keep)}
        needle = search.lower()
        found = [line for line in self.store.logs.list(**{key: ident}) if needle in line["line"].lower()]
        return {"lines": found[-keep:], "matches": len(found)}


def _where(runs: Sequence[Dict[str, Any]]) -> str:
    """Where the trial's latest run was placed, as the store recorded it: ``host (executor, N
    slots, gpu 0,1)``; ``-`` before its first run."""
    if not runs:
        return "-"
    run = runs[-1]
    slots = int(run.get("slots") or 1)
    parts = [str(run.get("executor") or "local"), f"{slots} slot{'s' if slots != 1 else ''}"]
    if run.get("devices"):
        parts.append("gpu " + ",".join(str(d) for d in run["devices"]))
    return f"{run.get('host')} ({', '.join(parts)})"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _flat_names(hparams: Dict[str, Any], prefix: str = "") -> List[str]:
    """``a.b`` for every leaf of nested hyperparameters."""
    names: List[str] = []
    for key, value in hparams.items():
        if isinstance(value, dict):
            names += _flat_names(value, f"{prefix}{key}.")
        else:
            names.append(f"{prefix}{key}")
    return names


def _hparam_type(config: Dict[str, Any], name: str) -> Optional[str]:
    """The ``type`` of the searched hyperparameter ``name`` (``a.b``) in ``config``."""
    spec = _lookup(config.get("hyperparameters") or {}, name.split("."))
    return str(spec.get("type")) if isinstance(spec, dict) and spec.get("type") else None


def _size(path: str) -> Optional[int]:
    """Bytes under ``path`` (a checkpoint directory), or None when it is gone."""
    if not os.path.exists(path):
        return None
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


__all__ = ["QueryError", "Queries"]
