"""Metric writers for TensorBoard (Determined's ``determined.tensorboard.metric_writers``)."""
