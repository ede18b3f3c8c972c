"""resolvent: an async dependency-injection container with compiled plans.

Declare what a function needs with ``Annotated[T, Resolve(fn)]``; the container compiles
the resolver graph once into a `Plan`, runs it in APP / SESSION / CALL scopes, tears
resources down in reverse order, and lets resolvers ask the user with `Elicit`.
"""

from typing import TYPE_CHECKING, Any

from ._container.container import Container
from ._graph.plan import Plan
from ._vocabulary.errors import (
    InputRequired,
    InvalidAnswer,
    InvalidSignature,
    NotAccepted,
    ResolventError,
    StateConflict,
    StateError,
    StateNotFound,
    StateTooLarge,
    StoreUnavailable,
)
from ._vocabulary.markers import Elicit, Resolve, inline, settles
from ._vocabulary.scopes import Scope

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
    "StateTooLarge",
    "StoreUnavailable",
    "add_store_scheme",
    "inline",
    "open_store",
    "settles",
)

__version__ = "0.1.0"


def _name_exceptions_here() -> None:
    """Tracebacks and reprs name the public exceptions where users import them from
    (`resolvent.InvalidSignature`), not the private module that defines them, as httpx and
    trio do. (The lazily loaded names hold no exception.)"""
    for name in __all__:
        public = globals().get(name)
        if isinstance(public, type) and issubclass(public, BaseException):
            public.__module__ = __name__


_name_exceptions_here()
del _name_exceptions_here

# Imported on first use only: the outcome models and `State` need pydantic, the state
# stores are needed only by a program that keeps state (`SqliteStore` needs sqlite3), and
# `Call` and `Session` only by a program that opens CALL or SESSION scopes (the container
# loads them with the first one).
_OUTCOMES = frozenset({"Accepted", "Cancelled", "Declined", "ElicitationResult"})
_STATE = frozenset({"Handle", "State"})
_STORES = frozenset({"StateKey", "StateStore"})

if TYPE_CHECKING:
    from ._container.call import Call
    from ._container.session import Session
    from ._state import Held
    from ._state.state import Handle, State
    from ._stores import StateKey, StateStore
    from ._stores.memory import MemoryStore
    from ._stores.opener import add_store_scheme, open_store
    from ._stores.sqlite import SqliteStore
    from ._vocabulary.outcomes import Accepted, Cancelled, Declined, ElicitationResult


def __getattr__(name: str) -> Any:
    module: Any
    if name in _OUTCOMES:
        from ._vocabulary import outcomes as module
        from ._vocabulary.questions import load_outcomes

        load_outcomes()  # the outcome models join the outcome families on first use
    elif name in _STATE:
        from ._state import state as module
    elif name == "Held":
        from . import _state as module
    elif name in _STORES:
        from . import _stores as module
    elif name == "MemoryStore":
        from ._stores import memory as module
    elif name == "SqliteStore":
        from ._stores import sqlite as module
    elif name == "Call":
        from ._container import call as module
    elif name == "Session":
        from ._container import session as module
    elif name in ("open_store", "add_store_scheme"):
        from ._stores import opener as module
    else:
        raise AttributeError(f"module 'resolvent' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
