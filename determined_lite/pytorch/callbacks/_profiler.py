"""Profiler: ``torch.profiler`` over chosen training batches, traces in TensorBoard's directory.

``torch.profiler`` is imported when training starts, not with this module.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("determined_lite")


def _check_batch(name: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Profiler({name}=...) must be a batch index >= 0, got {value!r}")


class Profiler(PyTorchCallback):
    """Profiles training batches ``begin_on_batch`` to ``end_after_batch`` (inclusive; unset:
    to the last batch of ``max_length``) with ``torch.profiler.profile`` on every worker.

    The batch before ``begin_on_batch`` is the profiler's warm-up (not recorded). Traces are
    written when the range ends (or training ends) by ``tensorboard_trace_handler`` into the
    trial's TensorBoard directory (``context.get_tensorboard_path()``, or ``dirname``), one file
    per worker named ``rank<N>.<id>.pt.trace.json``; each batch is marked ``ProfilerStep#<n>``,
    n counted from this run's first batch (the batch index unless the run resumed). TensorBoard's
    PyTorch Profiler tab (``torch-tb-profiler``), chrome://tracing or Perfetto read them.

    Other keyword arguments go to ``torch.profiler.profile`` (``activities``, ``record_shapes``,
    ``profile_memory``, ``with_stack``, ...); with ``schedule`` (a ``torch.profiler.schedule``)
    torch's schedule is used instead of the batch range, its steps counted from this run's
    first batch, as in Determined's ``context.set_profiler``. A validation inside the range is
    recorded too. A long range holds every event in memory until it ends: keep it short.
    """

    def __init__(
        self,
        begin_on_batch: int = 0,
        end_after_batch: Optional[int] = None,
        *,
        dirname: Optional[str] = None,
        **profile_kwargs: Any,
    ) -> None:
        _check_batch("begin_on_batch", begin_on_batch, allow_none=False)
        _check_batch("end_after_batch", end_after_batch, allow_none=True)
        if end_after_batch is not None and end_after_batch < begin_on_batch:
            raise ValueError(
                f"Profiler(end_after_batch={end_after_batch}) is before begin_on_batch={begin_on_batch}"
            )
        if "on_trace_ready" in profile_kwargs:
            raise ValueError(
                "Profiler writes its traces into the trial's TensorBoard directory; pass dirname= "
                "instead of on_trace_ready="
            )
        self.begin_on_batch = begin_on_batch
        self.end_after_batch = end_after_batch
        self.dirname = dirname
        self.profile_kwargs: Dict[str, Any] = dict(profile_kwargs)
        self._rank = 0
        self._first = 0
        self._end = 0
        self._context: Any = None
        self._dir: Optional[str] = None
        self._profile: Any = None

    def setup(self, context: PyTorchTrialContext) -> None:
        path = context.get_tensorboard_path()
        self._dir = self.dirname or (None if path is None else str(path))
        if not self._dir:
            raise ValueError(
                "Profiler needs a directory for its traces: the trial has no TensorBoard directory "
                "(init(enable_tensorboard_logging=False)); pass Profiler(dirname=...)"
            )
        self._rank = context.distributed.rank
        self._context = context

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        self._first = first_batch_idx

    def _schedule(self, actions: Any, end: int) -> Callable[[int], Any]:
        """Step n of this run is batch ``first + n``: none, warm-up, record, record and save."""
        first, begin = self._first, self.begin_on_batch

        def action(step: int) -> Any:
            batch = first + step
            if batch < begin - 1:
                return actions.NONE
            if batch < begin:
                return actions.WARMUP
            if batch < end:
                return actions.RECORD
            return actions.RECORD_AND_SAVE if batch == end else actions.NONE

        return action

    def on_training_start(self) -> None:
        user_schedule = "schedule" in self.profile_kwargs
        # The last batch profiled: end_after_batch, else the plan's last batch.
        last = self._context.harness.state.plan.max_batches - 1
        self._end = last if self.end_after_batch is None else min(self.end_after_batch, last)
        if not user_schedule and max(self._first, self.begin_on_batch) > self._end:
            logger.info(
                "Profiler: nothing to profile: batches %d-%s are not among this run's batches %d-%d",
                self.begin_on_batch,
                "end" if self.end_after_batch is None else self.end_after_batch,
                self._first,
                last,
            )
            return
        import torch.profiler

        from determined_lite.store._paths import make_private_dirs

        assert self._dir is not None
        make_private_dirs(self._dir)
        kwargs = dict(self.profile_kwargs)
        if not user_schedule:
            kwargs["schedule"] = self._schedule(torch.profiler.ProfilerAction, self._end)
        handler = torch.profiler.tensorboard_trace_handler(self._dir, worker_name=f"rank{self._rank}")
        self._profile = torch.profiler.profile(on_trace_ready=handler, **kwargs)
        self._profile.start()

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        if self._profile is None:
            return
        self._profile.step()
        if "schedule" not in self.profile_kwargs and batch_idx >= self._end:
            self._stop()

    def _stop(self) -> None:
        profile, self._profile = self._profile, None
        if profile is not None:
            profile.stop()  # writes the trace of a range still open

    def on_trial_shutdown(self) -> None:
        self._stop()
