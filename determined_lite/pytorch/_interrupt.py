"""Ctrl-C during a plain-Python ``Trainer.fit``, handled as ``det-lite experiment create`` handles
it: the first asks the run to stop at its next report, with a checkpoint there (as ``experiment
pause``); the second interrupts at once (``KeyboardInterrupt``). Either way the run's last line
names the checkpoint to resume from and how.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Dict, Iterator, Optional

from determined_lite.pytorch._callback import PyTorchCallback


class FitInterrupted(SystemExit, KeyboardInterrupt):
    """How ``fit`` ends after a first Ctrl-C stopped it at a checkpoint: a script exits with
    status 1 and no traceback (as the CLI after a pause); ``except KeyboardInterrupt`` still
    catches it. ``result`` is the ``TrainResult`` of the stopped run."""

    def __init__(self, result: Any) -> None:
        super().__init__(1)
        self.result = result


class CtrlC:
    """Counts SIGINTs while ``installed``: the first only sets ``requested``, the second raises
    ``KeyboardInterrupt`` where the run is."""

    def __init__(self) -> None:
        self.presses = 0

    @property
    def requested(self) -> bool:
        return self.presses > 0

    @contextlib.contextmanager
    def installed(self, enabled: bool) -> Iterator["CtrlC"]:
        """Catch SIGINT during the ``with`` when ``enabled``, on the main thread, and when Python's
        own handler is in place (a handler of the user's is left alone)."""
        if (
            not enabled
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield self
            return
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.presses += 1
        if self.presses > 1:
            raise KeyboardInterrupt


class CtrlCNotice(PyTorchCallback):
    """Says, at the first batch end after a first Ctrl-C, that the run stops at its next report
    (said here, not in the signal handler: printing there can break a write in progress)."""

    def __init__(self, ctrl_c: CtrlC, say: Callable[[str], None]) -> None:
        self.ctrl_c = ctrl_c
        self.say = say
        self.said = False
        self._context: Any = None

    def setup(self, context: Any) -> None:
        self._context = context

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        if not self.ctrl_c.requested or self.said:
            return
        self.said = True
        plan = self._context.harness.state.plan
        every = plan.report_every if plan is not None else None
        at = f" (batch {min(-(-(batch_idx + 1) // every) * every, plan.max_batches)})" if every else ""
        self.say(f"Ctrl-C: stopping at the next report{at} with a checkpoint; Ctrl-C again to stop now")


def resume_hint(stopped_at: int, checkpoint: Optional[Dict[str, Any]]) -> str:
    """How to go on from a run stopped at batch ``stopped_at`` whose newest live checkpoint is
    ``checkpoint``."""
    if checkpoint is None:
        return f"stopped at batch {stopped_at} with no checkpoint: fit() again starts from batch 0"
    return (
        f"stopped at batch {stopped_at}; resume from batch {checkpoint['total_batches']} with "
        f"fit(latest_checkpoint={checkpoint['path']!r})"
    )
