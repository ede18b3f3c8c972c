"""The scopes: the ordered lifetimes APP > SESSION > CALL, and where each one's live scope
sits in a scopes tuple (`SLOTS`).

Plain data that every layer reads; never imports another module of the package. A scope
is added here (its member, in order of lifetime) and in what opens it and checks it is
open (`resolvent._container.launch.check_scopes`): the code that runs plans reads every
scope through `SLOTS`, and names none but CALL and APP.
"""

from __future__ import annotations

import enum

__all__ = ("CALL_SLOT", "SLOTS", "Scope")


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


def _slots() -> tuple[int, ...]:
    found = [-1] * (max(Scope) + 1)
    for place, scope in enumerate(sorted(Scope, reverse=True)):
        found[scope] = place
    return tuple(found)


SLOTS: tuple[int, ...] = _slots()
"""Each scope's place in a scopes tuple, indexed by the scope (its value), longest-lived
first: ``SLOTS[Scope.APP]`` is 0, SESSION 1, CALL 2. A tuple, not a dict: an enum member
hashes through a Python-level lookup, indexing by one costs what an int does.

A scopes tuple is how the scopes a plan runs in travel together, one entry per scope,
never one parameter each: the live scope (`resolvent._runtime.cache.LiveScope`) of each
scope but CALL, or None when it is not open; at CALL, the call scope (a `Call`), the
exits a ``kept`` function lists its resources in (a `Kept`), or None. Generated code
takes it as ``scopes`` and the interpreter reads it the same way."""

CALL_SLOT = SLOTS[Scope.CALL]
"""Where the CALL scope sits in a scopes tuple: last."""
