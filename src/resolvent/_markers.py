"""The markers users write: `Resolve` on parameters, `Elicit` as a resolver's return."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ("Elicit", "Resolve")

ModelT = TypeVar("ModelT", bound="BaseModel")


class Resolve:
    """Fill a parameter by running a resolver: ``Annotated[T, Resolve(fn)]``.

    Args:
        fn: the resolver. Omit it (``Resolve()``) to look the provider up by the
            annotated type ``T`` in the container's registry.

    The resolver's own parameters are filled the same way, so resolvers form a graph
    that the container compiles once into a `Plan`.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        if self.fn is None:
            return "Resolve()"
        return f"Resolve({getattr(self.fn, '__qualname__', self.fn)!r})"


class Elicit(Generic[ModelT]):
    """A resolver's request to ask the user a question.

    Return ``Elicit(message, Schema)`` from a resolver; the call scope's asker answers it
    and the consumer receives the validated model (or, with an `ElicitationResult`
    annotation, the whole outcome).

    Args:
        message: the text shown to the user.
        schema: a pydantic model describing the answer's fields.
    """

    __slots__ = ("message", "schema")

    def __init__(self, message: str, schema: type[ModelT]) -> None:
        self.message = message
        self.schema = schema

    def __repr__(self) -> str:
        return f"Elicit({self.message!r}, {self.schema.__name__})"
