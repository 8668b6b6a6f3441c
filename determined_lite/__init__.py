"""determined_lite: Determined's PyTorch trial API without a cluster."""

from determined_lite._errors import InvalidHP

__version__ = "0.1.0"

__all__ = ["InvalidHP", "__version__"]
