"""Experiment configuration: length units now; the validated schema comes with the experiments layer."""

from determined_lite.config.units import Batch, Epoch, Record, TrainUnit, length_from_config

__all__ = ["Batch", "Epoch", "Record", "TrainUnit", "length_from_config"]
