"""``core_context.train``: metrics, progress and early exits of a Core API script.

In a trial det-lite runs, the chief writes every report to the experiment store through the
trial's ``TrialReporter`` (the writer class trials use too), to TensorBoard (``MetricScalars``,
as for class trials) and to the progress file the runner's bar reads; other ranks write
nothing (report from the chief, as Determined's examples do). Outside det-lite (local mode)
reports are logged only, as Determined's local mode does.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Dict, List, Optional

from determined_lite._progress import TrialProgress, write_progress
from determined_lite.core._calls import note_call

logger = logging.getLogger("determined_lite")


class EarlyExitReason(enum.Enum):
    """Why a script ended its trial early (Determined's values)."""

    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


def _plain(metrics: Dict[str, Any]) -> Dict[str, Any]:
    from determined_lite.pytorch._reducer import to_json_metric

    return {name: to_json_metric(value, name, "reported") for name, value in metrics.items()}


class TrainContext:
    """Reports metrics and progress of the trial (``core_context.train``).

    ``trial``: the worker's ``launch._script.ScriptTrial`` (None in local mode).
    """

    def __init__(self, distributed: Any, trial: Any = None, tensorboard_path: Optional[str] = None) -> None:
        self._dist = distributed
        self._trial = trial
        self._tensorboard_path = tensorboard_path
        self._reporter = trial.reporter if trial is not None else None
        self._progress_path: Optional[str] = None
        if trial is not None and self._reporter is not None:
            from determined_lite.runtime._spec import progress_path

            self._progress_path = progress_path(trial.spec.result_path)
        self._scalars: Any = None  # TensorBoard, as for class trials (the chief's reports)
        if trial is not None and tensorboard_path is not None and distributed.is_chief:
            from determined_lite.pytorch._reporting import MetricScalars

            self._scalars = MetricScalars(tensorboard_path, trial.spec.hparams)
        self._progress = TrialProgress(
            total_batches=trial.start_steps if trial is not None else 0,
            metric=trial.spec.training_settings().searcher_metric if trial is not None else None,
        )

    def _publish(self) -> None:
        if self._progress_path is not None:
            try:
                write_progress(self._progress_path, self._progress)
            except OSError:  # only a progress bar reads it
                pass

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Dict[str, Any],
        batch_metrics: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        """Record training ``metrics`` at ``steps_completed`` (the chief's are stored)."""
        self.report_metrics("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Dict[str, Any]) -> None:
        """Record validation ``metrics`` at ``steps_completed``; the searcher metric among them is
        what the searcher reads when the script ends without ``op.report_completed``."""
        self.report_metrics("validation", steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Dict[str, Any]) -> None:
        """Record ``metrics`` of ``group`` (``training`` and ``validation`` are stored; other
        groups are logged)."""
        stored = group in ("training", "validation")
        call = f"report_{group}_metrics(" if stored else f"report_metrics({group!r}, "
        note_call(self._trial, f"core_context.train.{call}steps_completed={steps_completed})")
        plain = _plain(metrics)
        logger.info("report_%s_metrics(steps_completed=%s, metrics=%s)", group, steps_completed, plain)
        trial = self._trial
        if trial is None or not self._dist.is_chief:
            return
        trial.note_report(group, steps_completed, plain)
        if self._reporter is None or group not in ("training", "validation"):
            return
        self._progress.total_batches = steps_completed
        if self._scalars is not None:
            self._scalars.write(group, steps_completed, plain)
        if group == "training":
            self._reporter.training(steps_completed, plain)
            loss = plain.get("loss")
            self._progress.loss = float(loss) if isinstance(loss, (int, float)) else self._progress.loss
        else:
            self._reporter.validation(steps_completed, plain)
            value = plain.get(self._progress.metric or "")
            if isinstance(value, (int, float)):
                self._progress.metric_value = float(value)
        self._publish()

    def report_progress(self, progress: float) -> None:
        """Training progress in [0, 1] (for the progress bar)."""
        if not 0.0 <= float(progress) <= 1.0:
            raise ValueError(f"progress must be between 0 and 1, got {progress}")
        note_call(self._trial, f"core_context.train.report_progress({progress})")
        if self._trial is not None and self._dist.is_chief:
            target = self._trial.target
            if target:
                self._progress.max_batches = int(target)
                self._progress.total_batches = round(float(progress) * target)
                self._publish()

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """End this trial early when the script returns: ``INVALID_HP`` (the searcher drops its
        hyperparameters) or ``USER_REQUESTED_STOP``; other trials go on."""
        reason = EarlyExitReason(reason)
        note_call(self._trial, f"core_context.train.report_early_exit({reason})")
        logger.info("report_early_exit(%s)", reason)
        if self._trial is not None and self._dist.is_chief:
            self._trial.early_exit = reason

    def get_experiment_best_validation(self) -> Optional[float]:
        """The best searcher metric reported so far by any trial of the experiment."""
        if self._trial is None or self._reporter is None:
            return None
        return self._trial.experiment_best_validation()

    def set_status(self, status: str) -> None:
        note_call(self._trial, f"core_context.train.set_status({status!r})")
        logger.info("set_status(%s)", status)

    def get_tensorboard_path(self) -> Any:
        """Where this trial's TensorBoard files go."""
        import pathlib

        if self._tensorboard_path is None:
            raise ValueError("this run has no TensorBoard directory")
        return pathlib.Path(self._tensorboard_path)

    def upload_tensorboard_files(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to upload: TensorBoard files are written in place."""

    def close(self) -> None:
        """Finish the TensorBoard file (``det.core.init()``'s context exit)."""
        if self._scalars is not None:
            self._scalars.close()
