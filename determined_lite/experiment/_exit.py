"""How an experiment command ends: the process exit codes (the CLI's too) and the refusal
``activate_experiment`` raises."""

from __future__ import annotations

import sys

# Process exit codes (the CLI's too): success, the experiment or a trial failed, bad input.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ActivationRefused(ValueError):
    """``activate_experiment`` on an experiment that has ended or that another process runs."""


def bad_input(message: str) -> int:
    """Print ``message`` as det-lite's one error line on stderr; returns :data:`EXIT_BAD_INPUT`."""
    from determined_lite._errors import error_line

    print(error_line(message), file=sys.stderr)
    return EXIT_BAD_INPUT
