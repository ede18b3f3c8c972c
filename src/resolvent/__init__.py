"""resolvent: an async dependency-injection container with compiled plans.

Declare what a function needs with ``Annotated[T, Resolve(fn)]``; the container compiles
the resolver graph once into a `Plan`, runs it in APP / SESSION / CALL scopes, tears
resources down in reverse order, and lets resolvers ask the user with `Elicit`.
"""

from ._container import Call, Container, Session
from ._errors import InputRequired, InvalidAnswer, InvalidSignature, NotAccepted, ResolventError
from ._markers import Elicit, Resolve
from ._outcomes import Accepted, Cancelled, Declined, ElicitationResult
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
)

__version__ = "0.1.0"
