"""``determined.tensorboard.metric_writers.pytorch`` for det-lite: det-lite's TorchWriter."""

from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter

__all__ = ["TorchWriter"]
