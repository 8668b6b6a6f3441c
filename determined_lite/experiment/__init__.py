"""Experiments: run a validated config's trials through the searcher, the launcher and the store.

``create_experiment`` and ``activate_experiment`` (``_create.py``) are what ``det-lite experiment
create`` and ``det-lite experiment activate`` call; both return the process exit code
(``_exit.py``). ``check_entrypoint`` (``_checks.py``) finds a trial's code without running it.
This package only re-exports; importing it imports only the standard library.
"""

from determined_lite.experiment._checks import check_entrypoint
from determined_lite.experiment._create import activate_experiment, create_experiment
from determined_lite.experiment._exit import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ActivationRefused

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "ActivationRefused",
    "activate_experiment",
    "check_entrypoint",
    "create_experiment",
]
