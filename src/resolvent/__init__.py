"""resolvent: an async dependency-injection container with compiled plans.

Declare what a function needs with ``Annotated[T, Resolve(fn)]``; the container compiles
the resolver graph once into a `Plan`, runs it in APP / SESSION / CALL scopes, tears
resources down in reverse order, and lets resolvers ask the user with `Elicit`.
"""

from typing import TYPE_CHECKING, Any

from ._call import Call
from ._container import Container
from ._errors import (
    InputRequired,
    InvalidAnswer,
    InvalidSignature,
    NotAccepted,
    ResolventError,
    StateConflict,
    StateError,
    StateNotFound,
)
from ._markers import Elicit, Resolve, inline
from ._plan import Plan
from ._scopes import Scope
from ._session import Session
from ._stores import StateKey, StateStore
from ._stores.memory import MemoryStore
from ._stores.opener import open_store

__all__ = (
    "Accepted",
    "Call",
    "Cancelled",
    "Container",
    "Declined",
    "Elicit",
    "ElicitationResult",
    "Handle",
    "Held",
    "InputRequired",
    "InvalidAnswer",
    "InvalidSignature",
    "MemoryStore",
    "NotAccepted",
    "Plan",
    "Resolve",
    "ResolventError",
    "Scope",
    "Session",
    "SqliteStore",
    "State",
    "StateConflict",
    "StateError",
    "StateKey",
    "StateNotFound",
    "StateStore",
    "inline",
    "open_store",
)

__version__ = "0.1.0"

_LAZY = frozenset({"Accepted", "Cancelled", "Declined", "ElicitationResult"})
_LAZY_STATE = frozenset({"Handle", "Held", "State"})

if TYPE_CHECKING:
    from ._outcomes import Accepted, Cancelled, Declined, ElicitationResult
    from ._state import Handle, Held, State
    from ._stores.sqlite import SqliteStore


def __getattr__(name: str) -> Any:
    # The outcome models need pydantic, which is imported on first use only.
    if name in _LAZY:
        from . import _outcomes
        from ._questions import load_outcomes

        load_outcomes()

        value = getattr(_outcomes, name)
        globals()[name] = value
        return value
    if name in _LAZY_STATE:  # pydantic too
        from . import _state

        value = getattr(_state, name)
        globals()[name] = value
        return value
    if name == "SqliteStore":  # sqlite3, on first use only
        from ._stores.sqlite import SqliteStore

        globals()[name] = SqliteStore
        return SqliteStore
    raise AttributeError(f"module 'resolvent' has no attribute {name!r}")
