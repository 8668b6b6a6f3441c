"""A collective that timed out, told as such (issue 28.8).

gloo ("Timed out waiting 3000ms for recv operation") and NCCL (the watchdog's "collective
operation timeout") name neither the collective's limit nor the rank that never arrived, and
their text also matches what a worker sees when a peer dies, so the timeout was taken for a
peer's failure, nobody recorded it and the launcher blamed the first rank to exit. Standard
library only.
"""

from __future__ import annotations

import os

from determined_lite._timeouts import COLLECTIVE_TIMEOUT_ENV, DEFAULT_COLLECTIVE_TIMEOUT_S

# Text of the errors gloo and NCCL raise in a worker whose collective timed out: a peer never
# arrived, and neither engine says which one.
_TIMEOUT_MARKERS = (
    "Timed out waiting",
    "Application timeout caused pair closure",
    "collective operation timeout",
)


class CollectiveTimeout(RuntimeError):
    """A collective waited ``$DET_LITE_COLLECTIVE_TIMEOUT`` seconds for a rank that never came.

    Not a :class:`PeerFailure`: the rank that did not arrive may not have failed at all (it
    hangs, or runs much longer), so this is the trial's story and is recorded as its error.
    """


def is_collective_timeout(error: BaseException) -> bool:
    """Whether ``error`` is a collective's timeout (gloo's or NCCL's text, or ours)."""
    if isinstance(error, CollectiveTimeout):
        return True
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, RuntimeError) and any(m in text for m in _TIMEOUT_MARKERS)


def collective_timeout(error: BaseException, what: str, rank: int) -> CollectiveTimeout:
    """The one-line timeout ``error`` of ``what`` on ``rank``: it was a timeout, after how long,
    and that which rank did not arrive is unknown (gloo and NCCL do not say)."""
    if isinstance(error, CollectiveTimeout):
        return error
    limit = os.environ.get(COLLECTIVE_TIMEOUT_ENV) or f"{DEFAULT_COLLECTIVE_TIMEOUT_S:g}"
    return CollectiveTimeout(
        f"timeout: {what} on rank {rank} waited ${COLLECTIVE_TIMEOUT_ENV} ({limit} s) for the other "
        "ranks and at least one did not arrive; which one is unknown (the engine does not say): a "
        "rank that hangs or runs much longer than the others (e.g. evaluating alone) is the cause, "
        f"not rank {rank}. Engine error: {error}"
    )
