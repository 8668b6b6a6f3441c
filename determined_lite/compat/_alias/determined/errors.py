r"""``determined.errors``: the exception classes Determined users import and catch.

det-lite raises few of them itself; they exist so that trial code that catches or raises them
runs unchanged. Their hierarchy is Determined's (``InvalidDataTypeException`` and
``InvalidConfigurationException`` are ``InvalidExperimentException``\ s, which derive from
``BaseException`` as in Determined).
"""


class EnterpriseOnlyError(Exception):
    """A feature of Determined's enterprise edition."""


class InternalException(Exception):
    """An internal error of the harness."""


class InvalidExperimentException(BaseException):
    """The experiment (its config or code) is invalid."""


class InvalidDataTypeException(InvalidExperimentException):
    """The trial returned data of a type the harness cannot use."""


class InvalidConfigurationException(InvalidExperimentException):
    """The experiment configuration is invalid."""


class InvalidModelException(InvalidExperimentException):
    """The model definition is invalid."""


class InvalidCheckpointException(Exception):
    """A checkpoint cannot be used."""


class StopLoadingImplementation(Exception):
    """Raised by code that stops loading a trial implementation on purpose."""


class WorkerError(Exception):
    """A worker of the trial failed."""


class WorkerFinishedGracefully(Exception):
    """A worker ended on request."""


class SkipWorkloadException(Exception):
    """The current workload is skipped."""


class CheckpointNotFound(Exception):
    """No checkpoint matches what was asked for."""


class CheckpointStateException(Exception):
    """A checkpoint is in a state that does not allow the operation."""


class NoDirectStorageAccess(Exception):
    """Checkpoint storage cannot be reached directly."""


class ProxiedDownloadFailed(Exception):
    """A proxied checkpoint download failed."""


class MultipleDownloadsFailed(Exception):
    """Several checkpoint downloads failed."""
