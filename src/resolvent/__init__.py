"""resolvent: an async dependency-injection container with compiled plans.

Declare what a function needs with ``Annotated[T, Resolve(fn)]``; the container compiles
the resolver graph once into a `Plan`, runs it in APP / SESSION / CALL scopes, tears
resources down in reverse order, and lets resolvers ask the user with `Elicit`.
"""

from typing import TYPE_CHECKING, Any

from ._container import Call, Container, Session
from ._errors import InputRequired, InvalidAnswer, InvalidSignature, NotAccepted, ResolventError
from ._markers import Elicit, Resolve, inline
from ._plan import Plan
from ._scopes import Scope

__all__ = (
    "Accepted",
    "Call",
    "Cancelled",
    "Container",
    "Declined",
    "Elicit",
    "ElicitationResult",
    "InputRequired",
    "InvalidAnswer",
    "InvalidSignature",
    "NotAccepted",
    "Plan",
    "Resolve",
    "ResolventError",
    "Scope",
    "Session",
    "inline",
)

__version__ = "0.1.0"

_LAZY = frozenset({"Accepted", "Cancelled", "Declined", "ElicitationResult"})

if TYPE_CHECKING:
    from ._outcomes import Accepted, Cancelled, Declined, ElicitationResult


def __getattr__(name: str) -> Any:
    # The outcome models need pydantic, which is imported on first use only.
    if name in _LAZY:
        from . import _outcomes

        value = getattr(_outcomes, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'resolvent' has no attribute {name!r}")
