"""The runner's answer to ``Trial.kill()`` (the SDK's, ``store.requests.kill_trial``): each
trial whose kill was asked stops now (its process group, as a kill of the experiment stops it),
ends CANCELED, and its searcher is told it exited early (``USER_CANCELED``); the experiment's
other trials and the search go on, as in Determined."""

from __future__ import annotations

from typing import Any

from determined_lite.searcher import ExitReason
from determined_lite.store._states import TrialState


def apply_trial_kills(runner: Any) -> None:
    """Handle the kills asked of ``runner``'s trials (an ``ExperimentRunner``) since its last poll."""
    killed = set(runner.store.requests.trial_kills(runner.id))
    if not killed:
        return
    stopped = False
    for request in list(runner.requests.values()):
        if request.trial_id not in killed:
            continue
        if not request.finished:
            run = runner.running.pop(request.request_id, None)
            if run is not None:
                run.process.stop()
                runner.progress.stop(request.trial_id)
                stopped = True
            if request.request_id in runner.queue:
                runner.queue.remove(request.request_id)
            runner._log(request.trial_id, f"trial {request.trial_id} killed; the search goes on")
            runner._exit_early(request, ExitReason.USER_CANCELED, TrialState.CANCELED)
        runner.store.requests.clear_trial_kill(request.trial_id)
    if stopped:
        runner._reconcile()  # checkpoints a stopped run left unregistered
    runner._save_state()
