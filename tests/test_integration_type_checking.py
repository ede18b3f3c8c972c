"""Handlers whose annotations name classes imported only under TYPE_CHECKING, behind
`resolvent.mcp.inject` and `resolvent.starlette.inject` (issue: annotations resolvent does
not need never fail). The postponed annotations below are what such a module looks like."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import pytest
from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from starlette.testclient import TestClient

from mcp_helpers import MODES, client, text
from resolvent import Container, InvalidSignature, Resolve
from resolvent.mcp import inject as mcp_inject
from resolvent.starlette import inject as web_inject

if TYPE_CHECKING:  # never imported at run time
    from decimal import Decimal
    from fractions import Fraction


async def greeting() -> str:
    return "hello"


@pytest.mark.parametrize("mode", MODES)
async def test_an_mcp_tool_returning_a_type_checking_only_class(mode: str) -> None:
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)

    @server.tool()
    @mcp_inject(container)
    async def greet(name: str, word: Annotated[str, Resolve(greeting)]) -> Decimal:
        return f"{word}, {name}"  # type: ignore[return-value]

    async with client(server, mode) as c:
        tools = (await c.list_tools()).tools
        assert list(tools[0].input_schema["properties"]) == ["name"]
        assert text(await c.call_tool("greet", {"name": "Ada"})) == "hello, Ada"


def test_an_mcp_tool_whose_argument_type_is_missing_is_refused_naming_it() -> None:
    container = Container()

    async def tool(amount: Fraction, word: Annotated[str, Resolve(greeting)]) -> str:
        return word

    with pytest.raises(InvalidSignature) as info:
        mcp_inject(container)(tool)
    message = str(info.value)
    assert "parameter 'amount'" in message and "Fraction" in message
    assert "TYPE_CHECKING" in message


def test_a_web_route_returning_a_type_checking_only_class() -> None:
    container = Container()
    app = FastAPI(lifespan=container.lifespan)

    @app.get("/greet")
    @web_inject(container)
    async def greet(name: str, word: Annotated[str, Resolve(greeting)]) -> Decimal:
        return f"{word}, {name}"  # type: ignore[return-value]

    with TestClient(app) as http:
        assert http.get("/greet", params={"name": "Ada"}).json() == "hello, Ada"
