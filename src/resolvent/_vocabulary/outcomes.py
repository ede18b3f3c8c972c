"""The outcomes of asking the user: accepted, declined or cancelled (pydantic models).
It imports nothing of the package: `_vocabulary.questions` registers these models as a family."""

from __future__ import annotations

from typing import Any, Generic, Literal, Union

from pydantic import BaseModel
from typing_extensions import TypeAliasType, TypeVar

__all__ = ("Accepted", "Cancelled", "Declined", "ElicitationResult")

DataT = TypeVar("DataT")


class Accepted(BaseModel, Generic[DataT]):
    """The user answered; *data* is the validated answer."""

    action: Literal["accept"] = "accept"
    data: DataT


class Declined(BaseModel):
    """The user explicitly said no."""

    action: Literal["decline"] = "decline"


class Cancelled(BaseModel):
    """The user dismissed the question without choosing."""

    action: Literal["cancel"] = "cancel"


ElicitationResult = TypeAliasType(
    "ElicitationResult",
    Union[Accepted[DataT], Declined, Cancelled],  # noqa: UP007
    type_params=(DataT,),
)
"""The outcome of a question: ``Accepted[T] | Declined | Cancelled``.

Annotate a consumer ``Annotated[ElicitationResult[T], Resolve(fn)]`` to receive it.
"""

OUTCOME_TYPES: tuple[type[BaseModel], ...] = (Accepted, Declined, Cancelled)


def accepted(data: Any) -> Accepted[Any]:
    """Wrap a value as accepted without validating it again."""
    return Accepted[Any].model_construct(data=data)
