r"""``determined.errors``: the exception classes Determined users import and catch.

They are det-lite's own (``determined_lite._errors``), so that what det-lite raises where
Determined raises one of them (e.g. ``InternalException`` from ``current_train_batch()`` before
training) is caught by trial code written for Determined. Their hierarchy is Determined's
(``InvalidDataTypeException`` and ``InvalidConfigurationException`` are
``InvalidExperimentException``\ s, which derive from ``BaseException`` as in Determined).
"""

from determined_lite import _errors as _det_lite_errors

__all__ = list(_det_lite_errors.DETERMINED_ERRORS)
globals().update({name: getattr(_det_lite_errors, name) for name in __all__})
