"""Parameters of one call that reach one handle share its lease and its value.

``merge(src=h, dst=h)``: two kinds of one name, whose handles are two call arguments,
given the same handle. Every store (memory, a SQLite file, a real Valkey) and every
execution mode, on asyncio and trio (pairwise: `stores_and_modes`): both parameters get one `Held`, one load, one
lease, one write; a read and an edit of one handle see one value, whichever resolves
first; and when a write of the call is refused, its error says truly what was written
and the call writes nothing after it.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from modes import MODES
from resolvent import (
    Handle,
    Held,
    Resolve,
    State,
    StateConflict,
    StateNotFound,
    StateStore,
)
from state_helpers import Clock, StoreKit, open_kind, stores_and_modes

pytestmark = pytest.mark.network  # the Redis store talks to 127.0.0.1


class Cart(BaseModel):
    items: dict[str, int] = {}


class Kit(StoreKit):
    """A container in *mode* with one store and two kinds named "cart", whose handles
    come from the call arguments ``src`` and ``dst``."""

    def __init__(self, mode: str, store: StateStore, **options: Any) -> None:
        super().__init__(mode, store)
        options = {"store": self.store, "wait": 0.2, **options}
        self.srcs = srcs = State("cart", Cart, argument="src", **options)
        self.dsts = dsts = State("cart", Cart, argument="dst", **options)
        self.gate: Callable[[], Any] | None = None

        async def open_cart(cart: Annotated[Held[Cart], Resolve(srcs.new)]) -> str:
            cart.value.items["apple"] = 1
            return cart.handle

        async def merge(
            src: Handle,
            dst: Handle,
            a: Annotated[Held[Cart], Resolve(srcs.edit)],
            b: Annotated[Held[Cart], Resolve(dsts.edit)],
        ) -> dict[str, int]:
            for item, qty in b.value.items.items():  # one cart: its quantities double
                a.value.items[item] = a.value.items.get(item, 0) + qty
            if a is not b:
                b.delete()
            if self.gate is not None:
                await self.gate()
            return dict(a.value.items)

        async def show(src: Handle, value: Annotated[Cart, Resolve(srcs.read)]) -> Cart:
            return value

        self.open_cart, self.merge, self.show = open_cart, merge, show


@stores_and_modes(MODES)
async def test_two_parameters_on_one_handle_share_its_lease_and_value(
    store_kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with open_kind(request, store_kind, tmp_path) as store:
        kit = Kit(mode, store)
        srcs, dsts = kit.srcs, kit.dsts

        async def read_then_edit(
            src: Handle,
            dst: Handle,
            seen: Annotated[Cart, Resolve(srcs.read)],
            edit: Annotated[Held[Cart], Resolve(dsts.edit)],
        ) -> bool:
            edit.value.items["pear"] = 1
            return seen is edit.value

        async def edit_then_read(
            src: Handle,
            dst: Handle,
            edit: Annotated[Held[Cart], Resolve(srcs.edit)],
            seen: Annotated[Cart, Resolve(dsts.read)],
        ) -> bool:
            edit.value.items["plum"] = 1
            return seen is edit.value

        async def read_and_edit_twice(
            src: Handle,
            dst: Handle,
            seen: Annotated[Cart, Resolve(srcs.read)],
            a: Annotated[Held[Cart], Resolve(srcs.edit)],
            b: Annotated[Held[Cart], Resolve(dsts.edit)],
        ) -> bool:  # in the concurrent mode, all three load at once
            a.value.items["fig"] = 1
            return a is b and seen is a.value

        async def fails(
            src: Handle,
            dst: Handle,
            a: Annotated[Held[Cart], Resolve(srcs.edit)],
            b: Annotated[Held[Cart], Resolve(dsts.edit)],
        ) -> None:
            a.value.items["lost"] = 1
            raise RuntimeError("the handler failed")

        async with kit.container:
            one, two = await kit.run(kit.open_cart), await kit.run(kit.open_cart)
            assert await kit.run(kit.merge, src=one, dst=one) == {"apple": 2}
            assert await kit.run(kit.show, src=one) == Cart(items={"apple": 2})
            assert await kit.run(read_then_edit, src=one, dst=one) is True
            assert await kit.run(edit_then_read, src=one, dst=one) is True
            assert await kit.run(read_and_edit_twice, src=one, dst=one) is True
            with pytest.raises(RuntimeError, match="the handler failed"):
                await kit.run(fails, src=one, dst=one)
            # Written once, and no lease left behind (a call waits 0.2 s at most).
            assert await kit.run(kit.show, src=one) == Cart(
                items={"apple": 2, "pear": 1, "plum": 1, "fig": 1}
            )
            # Two handles are two values: one merged into the other, which is deleted.
            assert await kit.run(kit.merge, src=one, dst=two) == {
                "apple": 3,
                "pear": 1,
                "plum": 1,
                "fig": 1,
            }
            assert await kit.run(kit.show, src=one) == Cart(
                items={"apple": 3, "pear": 1, "plum": 1, "fig": 1}
            )
            assert await kit.run(kit.open_cart) != two


@stores_and_modes(MODES)
async def test_a_refused_write_says_truly_what_the_call_wrote(
    store_kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One lease of a merge of two carts runs out mid-call and another call takes it
    (the destination's, then the source's, so each write comes first once): the merge's
    error says what it wrote, and it writes nothing after the refusal."""
    clock = Clock()
    async with open_kind(request, store_kind, tmp_path, clock) as store:
        kit = Kit(mode, store, lease=30, wait=30)
        async with kit.container:
            branches = {await _refused_merge(kit, clock, taken) for taken in ("dst", "src")}
            if mode != "concurrent":  # branches resolve and close in a set order
                assert branches == {"nothing written", "the other written"}


async def _refused_merge(kit: Kit, clock: Clock, taken: str) -> str:
    """Merge two new carts while another call takes the *taken* one's lease; check what
    the merge's error says against the store, and return which it said."""
    one, two = await kit.run(kit.open_cart), await kit.run(kit.open_cart)
    lost, other = (two, one) if taken == "dst" else (one, two)
    inside, release = anyio.Event(), anyio.Event()

    async def slow() -> None:
        inside.set()
        await release.wait()

    kit.gate = slow
    failures: list[StateConflict] = []

    async def late_merge() -> None:
        try:
            await kit.run(kit.merge, src=one, dst=two)
        except StateConflict as exc:
            failures.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(late_merge)
        await inside.wait()
        kit.gate = None
        clock.advance(31)  # both leases ran out; another call takes one
        assert await kit.run(kit.merge, src=lost, dst=lost) == {"apple": 2}
        release.set()
    (failure,) = failures
    message = str(failure).replace(lost, "LOST").replace(other, "OTHER")
    assert message.startswith("cart 'LOST' was not saved"), message
    assert await kit.run(kit.show, src=lost) == Cart(items={"apple": 2})
    if "nothing of this call was written" in message:
        # The other cart as it was: not merged into, not deleted.
        assert await kit.run(kit.show, src=other) == Cart(items={"apple": 1})
        return "nothing written"
    assert "this call's changes to cart 'OTHER' were" in message, message
    if other == one:
        assert await kit.run(kit.show, src=one) == Cart(items={"apple": 2})
    else:
        with pytest.raises(StateNotFound):  # merged into the other, so deleted
            await kit.run(kit.show, src=two)
    return "the other written"
