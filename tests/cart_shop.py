"""A cart shop on one State: the handlers the state fault tests drive against a store.

No `from __future__ import annotations`: the handlers name a State made in `Shop.__init__`,
which a string annotation could not find."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from resolvent import Container, Handle, Held, Resolve, Scope, State, StateStore, StoreUnavailable

HANG = 20.0  # seconds: only a hung call takes this long


class Cart(BaseModel):
    items: dict[str, int] = {}


class Shop:
    """A container with one State on *store*, and its handlers (lease and wait as given)."""

    def __init__(self, store: StateStore, *, lease: float = 4.0, wait: float) -> None:
        self.container = Container()

        async def provide() -> AsyncIterator[StateStore]:
            yield store

        self.container.provide(provide, scope=Scope.APP)
        carts = State("cart", Cart, store=provide, lease=lease, wait=wait)

        async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
            return cart.handle

        async def add(cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]):
            edit.value.items[item] = edit.value.items.get(item, 0) + 1
            return dict(edit.value.items)

        async def show(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
            return value

        self.open_cart, self.add, self.show = open_cart, add, show

    async def run(self, fn: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(HANG):
            return await self.container.run(fn, **kwargs)

    async def fails(self, fn: Any, **kwargs: Any) -> StoreUnavailable:
        """Run *fn*, which must fail with StoreUnavailable (and not hang)."""
        with pytest.raises(StoreUnavailable) as caught:
            await self.run(fn, **kwargs)
        return caught.value
