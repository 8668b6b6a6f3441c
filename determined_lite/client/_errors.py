"""Determined's SDK error types (``determined.common.api.errors``), raised where Determined's
master answers with an error: the same class names, hierarchy, ``message`` and ``status_code``,
so code written against Determined catches what det-lite raises. det-lite has no HTTP response:
``APIException`` takes the message and the status code Determined's master gives."""

from __future__ import annotations

import warnings
from typing import Any

from determined_lite.store import NotFoundError


class BadRequestException(Exception):
    """Determined's base class of the master's refusals; ``message`` is the text."""

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(message, *args)
        self.message = message

    def __str__(self) -> str:
        return self.message


class BadResponseException(Exception):
    """Determined's error for an answer it could not read (kept for ``except`` clauses)."""

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(message, *args)
        self.message = message

    def __str__(self) -> str:
        return self.message


class APIException(BadRequestException):
    """An operation the master refused: ``status_code`` is the HTTP code Determined's master
    gives for it (409 for a name that is taken, 400 for a bad argument)."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.response_error = None


class NotFoundException(APIException, NotFoundError):
    """Determined's 404; also det-lite's store ``NotFoundError`` (a ``KeyError``)."""

    def __init__(self, message: str) -> None:
        APIException.__init__(self, message, 404)

    def __str__(self) -> str:
        return self.message


class ForbiddenException(BadRequestException):
    """Determined's 403 (never raised by det-lite, which has no users)."""


class UnauthenticatedException(BadRequestException):
    """Determined's 401 (never raised by det-lite, which has no users)."""


def warn_deprecated(message: str, stacklevel: int = 3) -> None:
    """Determined's ``FutureWarning`` for a deprecated SDK call (``message``: its text), by
    default pointing at the code that called the deprecated one."""
    warnings.warn(message, FutureWarning, stacklevel=stacklevel)


def deprecated_call(old: str, new: str) -> None:
    """``warn_deprecated`` with Determined's usual text: ``old()`` is replaced by ``new``."""
    text = f"{old}() has been deprecated and will be removed in a future version.Please call {new} instead."
    warn_deprecated(text, 4)


__all__ = [
    "APIException",
    "BadRequestException",
    "BadResponseException",
    "ForbiddenException",
    "NotFoundException",
    "UnauthenticatedException",
]
