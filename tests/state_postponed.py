"""A kind of state and an idempotent handler in a module that postpones its annotations
(``from __future__ import annotations``): every annotation here is a string, which
resolvent reads in this module's namespace (tests/test_promises_state.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from resolvent import Handle, Held, Resolve, State


class Basket(BaseModel):
    items: dict[str, int] = {}


baskets = State("basket", Basket)


async def open_basket(basket: Annotated[Held[Basket], Resolve(baskets.new)]) -> str:
    return basket.handle


@baskets.idempotent
async def add(
    basket: Handle, item: str, edit: Annotated[Held[Basket], Resolve(baskets.edit)]
) -> Basket:
    """Add one item to a basket."""
    edit.value.items[item] = edit.value.items.get(item, 0) + 1
    return edit.value
