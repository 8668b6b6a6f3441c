"""TextEnum: the base of det-lite's named words (states, actions, statuses, exit reasons).

A member is its text everywhere text goes (SQLite, JSON, f-strings, the CLI's tables), so code
names the word once and files keep plain strings. Standard library only.
"""

from __future__ import annotations

import enum


class TextEnum(str, enum.Enum):
    """A ``str`` enum that is its value for ``str()`` and f-strings too (``f"{State.ACTIVE}"`` is
    ``ACTIVE``, not ``State.ACTIVE``), as Python 3.11's ``enum.StrEnum``; det-lite supports 3.10."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)
