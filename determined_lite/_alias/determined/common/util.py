"""``determined.common.util`` for det-lite: the metric group names Determined's scripts import
(``_LEGACY_TRAINING``, ``_LEGACY_VALIDATION``, ``_INFERENCE``: the groups of
``core_context.train.report_metrics``)."""

from determined_lite.compat._install import missing_attribute as _missing_attribute

_LEGACY_TRAINING = "training"
_LEGACY_VALIDATION = "validation"
_INFERENCE = "inference"

__all__ = ["_INFERENCE", "_LEGACY_TRAINING", "_LEGACY_VALIDATION"]


def __getattr__(name: str) -> object:
    raise _missing_attribute(__name__, name)
