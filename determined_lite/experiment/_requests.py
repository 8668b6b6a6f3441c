"""The runner's search bookkeeping: a searcher request (one trial) and where it stands, the
trial's seed, and the state saved after every event so ``activate`` resumes exactly."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Dict, List, Mapping, Optional

from determined_lite.config import OWN_LENGTH, SearcherSettings
from determined_lite.searcher import Operation, SearchMethod, op_from_dict, op_to_dict


def trial_seed(experiment_seed: int, request_id: str) -> int:
    """A trial's seed: fixed by the experiment seed and the searcher's request id."""
    digest = hashlib.sha256(f"{experiment_seed}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31)


def run_length(pending: int, own_length: Optional[int]) -> Optional[int]:
    """The length (searcher units) a run asked to train to ``pending`` ends at: ``pending``, or
    for a script whose length is its own (:data:`OWN_LENGTH`, Determined >= 0.38) the batches its
    ``fit`` reported (``own_length``); None when that is not known yet: only the script can say."""
    if pending != OWN_LENGTH:
        return pending
    return own_length


def metric_at_target(
    store: Any, trial_id: int, total_batches: int, pending: int, settings: SearcherSettings
) -> Optional[float]:
    """The searcher metric trial ``trial_id``, whose latest checkpoint is at ``total_batches``,
    reported there, when that checkpoint is at or past the length of a run to ``pending``
    (:func:`run_length`) already: the run the searcher asks for has nothing left to train, so
    the runner reports this instead of starting it. None: not there yet, or not known (no
    validation at the checkpoint, a script's own length not reported yet)."""
    length = run_length(pending, store.trials.own_length(trial_id))
    if length is None:
        return None
    for v in reversed(store.metrics.validation(trial_id)):
        metrics = v["metrics"]
        if v["total_batches"] != total_batches or settings.metric not in metrics:
            continue
        name = settings.time_metric or settings.unit
        reached = total_batches if name == "batches" else metrics.get(name)
        if isinstance(reached, (int, float)) and reached >= length:
            return float(metrics[settings.metric])
        return None
    return None


@dataclasses.dataclass
class TrialRequest:
    """One searcher request, i.e. one trial, and where it stands."""

    request_id: str
    trial_id: int
    hparams: Dict[str, Any]
    seed: int
    pending: Optional[int] = None  # length (searcher units) to train to; None when idle
    trained: int = 0  # length reached and reported to the searcher
    closed: bool = False
    finished: bool = False  # the trial's state is final
    restarts: int = 0
    stopped_early: bool = False  # the searcher closed it before max_length (ASHA)


@dataclasses.dataclass
class SearchState:
    """The runner's requests, its queue of requests to run, whether the searcher shut down, and
    the operations held while pausing (run on activate)."""

    requests: Dict[str, TrialRequest]
    queue: List[str]
    shutdown: bool
    held: List[Operation]

    def to_json(self, searcher: SearchMethod) -> Dict[str, Any]:
        """With the searcher's own state: what the store keeps for the experiment (its values
        are the live ones, not copies: encode it before anything changes)."""
        return {
            "searcher": searcher.state_dict(),
            "requests": {rid: dict(vars(r)) for rid, r in self.requests.items()},
            "queue": self.queue,
            "shutdown": self.shutdown,
            "held": [op_to_dict(op) for op in self.held],
        }

    @classmethod
    def load(cls, saved: Optional[Mapping[str, Any]], searcher: SearchMethod) -> Optional["SearchState"]:
        """The saved state (None if nothing was saved), restoring ``searcher``'s too. Runs that
        were in flight when the experiment stopped go back to the queue."""
        if not saved:
            return None
        searcher.load_state_dict(saved["searcher"])
        requests = {rid: TrialRequest(**r) for rid, r in saved["requests"].items()}
        queue = list(saved["queue"])
        queue += [rid for rid, r in requests.items() if r.pending is not None and rid not in queue]
        held = [op_from_dict(op) for op in saved.get("held", [])]
        return cls(requests, queue, saved["shutdown"], held)
