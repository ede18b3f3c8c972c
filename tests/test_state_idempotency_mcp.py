"""An MCP client supplies the idempotency key of a `State.idempotent` tool either as the
``idempotency_key`` argument or in the request's ``_meta`` under
``io.resolvent/idempotency-key``; through the SDK's real client, on both protocols (the
handshake one, 2025-11-25, and the sessionless 2026-07-28).
"""

import json
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from mcp_helpers import MODES, client, text
from resolvent import Container, Handle, Held, Resolve, State
from resolvent.mcp import inject

META = "io.resolvent/idempotency-key"


class Cart(BaseModel):
    items: dict[str, int] = {}


class Items(BaseModel):
    items: dict[str, int]


def shop(*, with_context: bool) -> MCPServer:
    container = Container()
    carts = State("cart", Cart)
    server = MCPServer("shop", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
        return cart.handle

    if with_context:  # a tool that takes the SDK's Context itself

        @server.tool()
        @inject(container)
        @carts.idempotent
        async def add(
            cart: Handle, item: str, ctx: Context, edit: Annotated[Held[Cart], Resolve(carts.edit)]
        ) -> Items:
            """Add one item to a cart."""
            assert isinstance(ctx, Context)
            edit.value.items[item] = edit.value.items.get(item, 0) + 1
            return Items(items=edit.value.items)

    else:

        @server.tool()
        @inject(container)
        @carts.idempotent
        async def add(
            cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
        ) -> Items:
            """Add one item to a cart."""
            edit.value.items[item] = edit.value.items.get(item, 0) + 1
            return Items(items=edit.value.items)

    @server.tool()
    @inject(container)
    async def show(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
        return value

    return server


@pytest.mark.parametrize("with_context", [False, True], ids=["plain", "takes-context"])
@pytest.mark.parametrize("mode", MODES)
async def test_the_idempotency_key_rides_the_request_meta_or_the_argument(
    mode: str, with_context: bool
) -> None:
    server = shop(with_context=with_context)
    async with client(server, mode) as c:
        tools = {tool.name: tool for tool in (await c.list_tools()).tools}
        # The schema shows the argument; _meta needs no parameter, and the Context none.
        assert set(tools["add"].input_schema["properties"]) == {"cart", "item", "idempotency_key"}
        # The handler's own description; the key's says what to send, and its bounds.
        assert tools["add"].description == "Add one item to a cart."
        key = json.dumps(tools["add"].input_schema["properties"]["idempotency_key"])
        assert '"maxLength": 200' in key and "send the same one again when you retry" in key
        cart = (await c.call_tool("open_cart", {})).structured_content["result"]  # type: ignore[index]

        async def add(item: str, key: str | None = None, **arguments: Any) -> Any:
            result = await c.call_tool(
                "add", {"cart": cart, "item": item, **arguments}, meta={META: key} if key else None
            )
            assert not result.is_error, text(result)
            return result.structured_content

        first = await add("fig", key="req-1")
        assert first == {"items": {"fig": 1}}
        # The retry, keyed in _meta: the first answer, and nothing added.
        assert await add("fig", key="req-1") == first
        # The same key as the argument is the same request.
        assert await add("fig", idempotency_key="req-1") == first
        # A new key in _meta is a new request; the argument wins over _meta.
        assert await add("pear", key="req-2") == {"items": {"fig": 1, "pear": 1}}
        assert await add("plum", key="req-2", idempotency_key="req-3") == {
            "items": {"fig": 1, "pear": 1, "plum": 1}
        }
        # Without a key anywhere, every call edits.
        await add("fig")
        shown = await c.call_tool("show", {"cart": cart})
        assert shown.structured_content == {"items": {"fig": 2, "pear": 1, "plum": 1}}


@pytest.mark.parametrize("mode", MODES)
async def test_a_meta_key_that_is_not_a_string_is_refused_saying_so(mode: str) -> None:
    server = shop(with_context=False)
    async with client(server, mode) as c:
        cart = (await c.call_tool("open_cart", {})).structured_content["result"]  # type: ignore[index]
        result = await c.call_tool("add", {"cart": cart, "item": "fig"}, meta={META: 42})
        assert result.is_error
        assert "idempotency_key must be a string of 1 to 200 characters, not int" in text(result)
        shown = await c.call_tool("show", {"cart": cart})
        assert shown.structured_content == {"items": {}}


@pytest.mark.parametrize("with_context", [False, True], ids=["plain", "takes-context"])
async def test_an_idempotent_tool_called_in_process_has_no_meta_and_takes_the_argument(
    with_context: bool,
) -> None:
    # `MCPServer.call_tool` with no request behind it (a test, another tool): no _meta to
    # read, so a call without a key edits each time and the argument still works.
    server = shop(with_context=with_context)
    async with server.settings.lifespan(server):
        opened = await server.call_tool("open_cart", {})
        cart = opened.structured_content["result"]  # type: ignore[union-attr,index]
        for _ in range(2):
            result = await server.call_tool("add", {"cart": cart, "item": "fig"})
            assert not result.is_error, text(result)  # type: ignore[arg-type]
        keyed = {"cart": cart, "item": "pear", "idempotency_key": "req-1"}
        first = await server.call_tool("add", keyed)
        assert await server.call_tool("add", keyed) == first
        shown = await server.call_tool("show", {"cart": cart})
        assert shown.structured_content == {"items": {"fig": 2, "pear": 1}}  # type: ignore[union-attr]


# `idempotent` adds one argument and changes nothing else a client sees: a tool that
# leaves an argument or its result unannotated shows the schema and gives the answer of
# the same tool without the decorator.
@pytest.mark.parametrize("mode", MODES)
async def test_an_idempotent_tool_shows_and_answers_as_the_tool_it_wraps(mode: str) -> None:
    container = Container()
    carts = State("cart", Cart)
    server = MCPServer("shop", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
        return cart.handle

    async def tag(cart: Handle, label, edit: Annotated[Held[Cart], Resolve(carts.edit)]):
        edit.value.items[str(label)] = 1
        return sorted(edit.value.items)

    server.tool(name="tag_once")(inject(container)(carts.idempotent(tag)))
    server.tool(name="tag")(inject(container)(tag))
    async with client(server, mode) as c:
        tools = {tool.name: tool for tool in (await c.list_tools()).tools}
        once, plain = tools["tag_once"], tools["tag"]
        del once.input_schema["properties"]["idempotency_key"]
        assert once.input_schema == plain.input_schema
        assert once.output_schema == plain.output_schema
        cart = (await c.call_tool("open_cart", {})).structured_content["result"]  # type: ignore[index]
        for name, label in (("tag", "pear"), ("tag_once", "fig")):
            result = await c.call_tool(name, {"cart": cart, "label": label})
            assert not result.is_error, text(result)
        again = await c.call_tool("tag_once", {"cart": cart, "label": "fig"})
        assert (again.structured_content, again.content) == (
            result.structured_content,
            result.content,
        )
        assert [item.text for item in again.content] == ["fig", "pear"]  # type: ignore[union-attr]
