"""``startup-hook.sh``: Determined sources the context directory's ``startup-hook.sh`` (under
``set -e``) in each trial container before it starts the trial; det-lite does the same before a
trial run's first process, in the context directory.

The hook is sourced by ``bash`` which then ``exec``s the run's command, so what the hook exports
reaches the trial and its output is the first lines of the trial's log. A command of the hook
that fails stops it there: the run ends with that status and one line saying so, and no worker
starts.
"""

from __future__ import annotations

import os
from typing import List

STARTUP_HOOK = "startup-hook.sh"

_SCRIPT = (
    'trap \'status=$?; if [ "$status" -ne 0 ]; then echo "det-lite: '
    + STARTUP_HOOK
    + " failed (exit status $status); the trial was not started\" >&2; fi' EXIT\n"
    "set -e\n"
    "source ./" + STARTUP_HOOK + "\n"
    "set +e\n"
    "trap - EXIT\n"
    'exec "$@"\n'
)


def with_startup_hook(argv: List[str], context_dir: str) -> List[str]:
    """``argv`` run after sourcing ``context_dir``'s ``startup-hook.sh``; ``argv`` itself when
    the context has none."""
    if not os.path.isfile(os.path.join(context_dir, STARTUP_HOOK)):
        return argv
    return ["bash", "-c", _SCRIPT, STARTUP_HOOK, *argv]


__all__ = ["STARTUP_HOOK", "with_startup_hook"]
