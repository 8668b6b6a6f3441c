"""How an experiment command ends: the process exit codes (the CLI's too) and the refusal
``activate_experiment`` raises."""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

# Process exit codes (the CLI's too): success, the experiment or a trial failed, bad input.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ActivationRefused(ValueError):
    """``activate_experiment`` on an experiment that has ended or that another process runs."""


def bad_input(message: str) -> int:
    """Print ``message`` as det-lite's one error line on stderr; returns :data:`EXIT_BAD_INPUT`."""
    from determined_lite._errors import error_line

    print(error_line(message), file=sys.stderr)
    return EXIT_BAD_INPUT


def errored_note(trials: Sequence[Mapping[str, Any]], metric: str, smaller_is_better: bool) -> str:
    """What a COMPLETED search's final line adds when trials errored (Determined completes the
    experiment and exits 0 too, yet an errored trial, above all the best one, must not pass
    unnoticed): ``"; 1 of 6 trials ERROR: 3 (the best by val_loss); see det-lite trial logs 3"``."""
    errored = [t for t in trials if str(t["state"]) == "ERROR"]
    if not errored:
        return ""
    scored = [t for t in trials if t.get("best_validation") is not None]
    sign = 1 if smaller_is_better else -1
    best = min(scored, key=lambda t: sign * t["best_validation"]) if scored else None
    ids = ", ".join(str(t["id"]) for t in errored)
    among = f" (the best by {metric} among them)" if best is not None and best in errored else ""
    return (
        f"; {len(errored)} of {len(trials)} trials ERROR: {ids}{among}; "
        f"see det-lite trial logs {errored[0]['id']}"
    )
