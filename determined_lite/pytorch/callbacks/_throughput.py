"""Throughput: training samples/s and batches/s at each report, start-up excluded."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch._trial import data_length
from determined_lite.pytorch.callbacks._scalars import ScalarWriter

logger = logging.getLogger("determined_lite")

SAMPLES_PER_SECOND = "throughput/samples_per_second"
BATCHES_PER_SECOND = "throughput/batches_per_second"


class Throughput(PyTorchCallback):
    """Measures training speed over each reporting period and writes ``throughput/
    samples_per_second`` and ``throughput/batches_per_second`` to TensorBoard (chief only).

    Excluded: the first ``warmup_batches`` batches of every run (start-up: lazy initialisation,
    allocator and kernel warm-up, the first collective), and time spent in validation and in
    writing checkpoints. Data loading and the reports' communication count. Samples are the
    chief's batch length (``data_length``) times the number of workers (a batch without a tensor
    to count gives batches/s only). Each measurement is kept
    in ``history`` as ``(batches, {tag: value})``. ``clock`` is for tests.
    """

    def __init__(self, warmup_batches: int = 1, clock: Callable[[], float] = time.perf_counter) -> None:
        if isinstance(warmup_batches, bool) or not isinstance(warmup_batches, int) or warmup_batches < 0:
            raise ValueError(
                f"Throughput(warmup_batches=...) must be an integer >= 0, got {warmup_batches!r}"
            )
        self.warmup_batches = warmup_batches
        self.history: List[Tuple[int, Dict[str, float]]] = []
        self._clock = clock
        self._context: Any = None
        self._writer = ScalarWriter()
        self._workers = 1
        self._seen = 0  # batches of this run
        self._since: Optional[float] = None  # start of the window; None during warm-up
        self._paused_at: Optional[float] = None
        self._excluded = 0.0
        self._batches = 0
        self._samples = 0
        self._batch_samples: Optional[int] = 0

    def setup(self, context: PyTorchTrialContext) -> None:
        self._context = context
        self._workers = context.distributed.size
        self._writer.bind(context)

    def on_training_start(self) -> None:
        self._seen = 0
        self._since = None
        if self.warmup_batches == 0:
            self._restart()

    def _restart(self) -> None:
        self._since = self._clock()
        self._excluded = 0.0
        self._batches = self._samples = 0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._batch_samples is None:
            return  # batches without a tensor to count: batches/s only
        try:
            self._batch_samples = data_length(batch) * self._workers
        except ValueError as e:
            logger.warning("Throughput: reporting batches/s only: %s", e)
            self._batch_samples = None

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self._seen += 1
        if self._since is None:
            if self._seen >= self.warmup_batches:
                self._restart()  # the window starts after the warm-up batches
            return
        self._batches += 1
        self._samples += self._batch_samples or 0

    # Time not spent training: validation and checkpoints.
    def _pause(self) -> None:
        self._paused_at = self._clock()

    def _resume(self) -> None:
        if self._paused_at is not None:
            self._excluded += self._clock() - self._paused_at
            self._paused_at = None

    def on_validation_start(self) -> None:
        self._pause()

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self._resume()

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        self._pause()

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self._resume()

    def on_training_workload_end(self, avg_metrics: Dict[str, Any], batch_metrics: Any) -> None:
        if self._since is None or self._batches == 0:
            return
        elapsed = self._clock() - self._since - self._excluded
        if elapsed > 0:
            step = self._context.harness.state.batches_done
            rates = {BATCHES_PER_SECOND: self._batches / elapsed}
            if self._batch_samples is not None:
                rates[SAMPLES_PER_SECOND] = self._samples / elapsed
            self.history.append((step, rates))
            self._writer.write(rates, step)
            if self._context.distributed.is_chief:
                logger.info(
                    "batch %d throughput: %s",
                    step,
                    ", ".join(f"{value:.4g} {tag.split('/')[-1]}" for tag, value in rates.items()),
                )
        self._restart()

    def on_trial_shutdown(self) -> None:
        self._writer.close()
