"""determined_lite: Determined's PyTorch trial API without a cluster."""

__version__ = "0.1.0"


class InvalidHP(Exception):
    """Raised by a trial whose hyperparameters cannot work; ends that trial, not the experiment."""


__all__ = ["InvalidHP", "__version__"]
