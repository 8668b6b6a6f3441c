"""``determined.tensorboard.metric_writers`` for det-lite (``from ... .pytorch import TorchWriter``)."""
