"""Schema versions move forward only, tried as a rolling deploy: an old worker and a new
worker side by side over one store (one SQLite file opened by each, one Valkey through a
client each, one memory store), in every execution mode, on asyncio and trio (pairwise:
`stores_and_modes`).

The new worker migrates the old worker's values; the old worker refuses the new worker's
values with a `StateError` naming both versions, never calls its own `migrate` on them,
and writes nothing back, so no field the new version added is ever lost.
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from modes import MODES
from resolvent import (
    Container,
    Handle,
    Held,
    InvalidSignature,
    MemoryStore,
    Resolve,
    Scope,
    State,
    StateError,
    StateStore,
)
from snapshot import assert_snapshot
from state_helpers import StoreKit, open_shared_stores, stores_and_modes

pytestmark = pytest.mark.network  # the Redis store talks to 127.0.0.1


class CartV2(BaseModel):
    items: dict[str, int] = {}


class CartV3(BaseModel):  # the new release adds notes
    items: dict[str, int] = {}
    notes: list[str] = []


class Worker(StoreKit):
    """One server process of a deployment: its own container and its own connection."""

    def __init__(self, mode: str, store: StateStore, model: type[BaseModel], **options: Any):
        super().__init__(mode, store)
        carts: State[Any] = State("cart", model, store=self.store, wait=0.2, **options)

        async def open_cart(cart: Annotated[Held[Any], Resolve(carts.new)]) -> str:
            return cart.handle

        async def add(cart: Handle, item: str, edit: Annotated[Held[Any], Resolve(carts.edit)]):
            edit.value.items[item] = edit.value.items.get(item, 0) + 1
            return edit.value

        async def note(cart: Handle, text: str, edit: Annotated[Held[Any], Resolve(carts.edit)]):
            edit.value.notes.append(text)
            return edit.value

        async def show(cart: Handle, value: Annotated[Any, Resolve(carts.read)]) -> Any:
            return value

        self.open_cart, self.add, self.note, self.show = open_cart, add, note, show


@stores_and_modes(MODES)
async def test_a_rolling_deploy_never_reads_a_newer_value_with_an_older_schema(
    store_kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    valkey = request.getfixturevalue("valkey_url") if store_kind == "redis" else None
    migrated_by_old: list[int] = []

    def old_migrate(version: int, data: Any) -> Any:  # written for versions before 2
        migrated_by_old.append(version)
        return {"items": data.get("items", {})}

    def new_migrate(version: int, data: Any) -> Any:
        return {**data, "notes": []}

    async with open_shared_stores(store_kind, tmp_path, valkey) as (one, two):
        old = Worker(mode, one, CartV2, version=2, migrate=old_migrate)
        new = Worker(mode, two, CartV3, version=3, migrate=new_migrate)
        async with old.container, new.container:
            handle = await old.run(old.open_cart)
            await old.run(old.add, cart=handle, item="apple")
            # The new worker upgrades what the old one wrote, and writes version 3.
            assert await new.run(new.show, cart=handle) == CartV3(items={"apple": 1})
            await new.run(new.note, cart=handle, text="gift wrap")
            newest = CartV3(items={"apple": 1}, notes=["gift wrap"])

            # The old worker refuses it, to read and to edit, and calls no migration.
            for attempt, args in ((old.show, {}), (old.add, {"item": "pear"})):
                with pytest.raises(StateError) as caught:
                    await old.run(attempt, cart=handle, **args)
                message = str(caught.value).replace(handle, "H")
                assert_snapshot("state_newer_version", message)
            assert migrated_by_old == []

            # Nothing was written back, and the old worker's edit left no lease behind:
            # the new worker edits at once (it waits 0.2 s at most).
            assert await new.run(new.show, cart=handle) == newest
            added = await new.run(new.add, cart=handle, item="pear")
            assert added == CartV3(items={"apple": 1, "pear": 1}, notes=["gift wrap"])


async def cart_store() -> AsyncIterator[StateStore]:
    store = MemoryStore()
    yield store
    await store.aclose()


def test_a_store_that_is_not_app_scoped_is_refused_at_compile_time() -> None:
    carts = State("cart", CartV2, store=cart_store)

    async def show(cart: Handle, value: Annotated[CartV2, Resolve(carts.read)]) -> CartV2:
        return value

    async def open_cart(cart: Annotated[Held[CartV2], Resolve(carts.new)]) -> str:
        return cart.handle

    with pytest.raises(InvalidSignature) as unregistered:
        Container().compile(show)
    assert_snapshot("state_store_not_app", str(unregistered.value))
    for scope in (Scope.CALL, Scope.SESSION):
        container = Container()
        container.provide(cart_store, scope=scope)
        for handler in (show, open_cart):
            with pytest.raises(InvalidSignature, match=f"which is {scope!r}"):
                container.compile(handler)
    container = Container()
    container.provide(cart_store, scope=Scope.APP)
    container.compile(show)
    container.compile(open_cart)
