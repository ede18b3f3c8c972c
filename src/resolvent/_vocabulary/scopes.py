"""The scopes: the ordered lifetimes APP > SESSION > CALL, and nothing else.

Plain data that every layer reads; never imports another module of the package.
"""

from __future__ import annotations

import enum

__all__ = ("Scope",)


class Scope(enum.IntEnum):
    """How long a provider's value lives, ordered by lifetime.

    ``Scope.APP > Scope.SESSION > Scope.CALL``. A provider may depend only on providers
    that live at least as long as itself.
    """

    CALL = 1
    """One call: one ``container.run``, one ``tools/call``, one request."""
    SESSION = 2
    """One client session (``container.session()``; one MCP session)."""
    APP = 3
    """The open container (``async with container``; the MCP server lifespan)."""

    def __repr__(self) -> str:
        return f"Scope.{self.name}"

    __str__ = __repr__
