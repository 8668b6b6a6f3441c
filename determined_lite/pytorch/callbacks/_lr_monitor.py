"""LRMonitor: the learning rates of every wrapped optimizer, to TensorBoard."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from determined_lite.pytorch._callback import PyTorchCallback
from determined_lite.pytorch._context import PyTorchTrialContext
from determined_lite.pytorch.callbacks._scalars import ScalarWriter


class LRMonitor(PyTorchCallback):
    """Writes ``lr/optimizer<i>/group<j>`` (the ``lr`` of param group ``j`` of the ``i``-th
    wrapped optimizer) when training starts and at every report, at the batch count reached.

    The values written are kept in ``history`` as ``(batches, {tag: lr})``; TensorBoard files
    are written by the chief only.
    """

    def __init__(self) -> None:
        self.history: List[Tuple[int, Dict[str, float]]] = []
        self._context: Any = None
        self._writer = ScalarWriter()

    def setup(self, context: PyTorchTrialContext) -> None:
        self._context = context
        self._writer.bind(context)

    def learning_rates(self) -> Dict[str, float]:
        """The current learning rate of every param group of every wrapped optimizer."""
        return {
            f"lr/optimizer{i}/group{j}": float(group["lr"])
            for i, optimizer in enumerate(self._context.optimizers)
            for j, group in enumerate(optimizer.param_groups)
        }

    def _record(self) -> None:
        step = self._context.harness.state.batches_done
        rates = self.learning_rates()
        self.history.append((step, rates))
        self._writer.write(rates, step)

    def on_training_start(self) -> None:
        self._record()

    def on_training_workload_end(self, avg_metrics: Dict[str, Any], batch_metrics: Any) -> None:
        self._record()

    def on_trial_shutdown(self) -> None:
        self._writer.close()
