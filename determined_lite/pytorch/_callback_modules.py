"""``det_lite.callback_modules``: the modules whose import registers global callbacks.

Workers started by ``det-lite experiment create`` are separate processes: a callback the user
registers in their own script never reaches them. Naming a module in the experiment config
does: every worker (and ``Trainer.fit`` from plain Python, with the same ``exp_conf``) imports
it before training, from the trial's context directory or the environment, and its
``register_global_callback(...)`` calls register the callbacks for every trial it runs.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Sequence

from determined_lite.pytorch._callback import global_callbacks

logger = logging.getLogger("determined_lite")

FIELD = "det_lite.callback_modules"


def import_callback_modules(names: Sequence[str]) -> None:
    """Import each module of ``names`` (once per process); an error names the config field."""
    for name in names:
        fresh = name not in sys.modules
        before = len(global_callbacks())
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"{FIELD}: cannot import {name!r}: {e}") from e
        if fresh and len(global_callbacks()) == before:
            logger.warning(
                "%s: importing %r registered no callback; call "
                "determined_lite.pytorch.register_global_callback(...) at its top level",
                FIELD,
                name,
            )
