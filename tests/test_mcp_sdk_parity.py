"""Tools written for the SDK's resolvers behave the same under `inject`.

The SDK's own resolver tests are the reference; these are our tests of the behaviours they
check, driven through the SDK's real in-memory client on both protocol revisions.
"""

from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import InvalidSignature as SdkInvalidSignature

from mcp_helpers import MODES, Name, client, text
from resolvent import Container, InvalidSignature
from resolvent.mcp import inject
from snapshot import assert_snapshot


async def ask_name(ctx: Context) -> Elicit[Name]:
    return Elicit("Your name?", Name)


def test_resolvers_and_an_own_input_required_return_are_refused_at_registration() -> None:
    """A tool cannot drive the rounds itself and through resolvers: one request_state."""
    container = Container()
    server = MCPServer("rounds", lifespan=container.lifespan)

    with pytest.raises(SdkInvalidSignature) as caught:

        @server.tool()
        @inject(container)
        async def greet(
            name: Annotated[Name, Resolve(ask_name)],
        ) -> str | types.InputRequiredResult:
            return f"hello {name.name}"  # pragma: no cover - refused before any call

    assert isinstance(caught.value, InvalidSignature)
    assert_snapshot("mcp_resolvers_and_own_rounds", str(caught.value))

    # Without resolvers the hand-written multi-round form stays available.
    @server.tool()
    @inject(container)
    async def manual(ctx: Context) -> types.InputRequiredResult | str:
        return "done"

    assert getattr(manual, "__wrapped__", None) is not None


def test_compile_errors_of_sdk_marker_tools_are_the_sdks_invalid_signature_too() -> None:
    """Code that catches the SDK's error around registration keeps working under inject."""
    container = Container()
    server = MCPServer("cycle")

    async def ask_city(name: "Annotated[str, Resolve(ask_country)]") -> str:
        return name  # pragma: no cover - refused before any call

    async def ask_country(city: Annotated[str, Resolve(ask_city)]) -> str:
        return city  # pragma: no cover

    async def travel(city: Annotated[str, Resolve(ask_city)]) -> str:
        return city  # pragma: no cover

    ask_city.__annotations__["name"] = Annotated[str, Resolve(ask_country)]
    with pytest.raises(SdkInvalidSignature) as caught:
        server.tool()(inject(container)(travel))
    assert isinstance(caught.value, InvalidSignature)
    assert "cycle" in str(caught.value)
    assert caught.value.path  # resolvent's own details survive


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_body_returning_its_own_input_required_with_resolvers_fails_the_call(
    mode: str,
) -> None:
    """Undeclared, the same clash is a crash of that call, not rounds that never end."""
    container = Container()
    server = MCPServer("sneaky", lifespan=container.lifespan)

    async def lookup(ctx: Context) -> str:
        return "ada"

    @server.tool()
    @inject(container)
    async def sneaky(login: Annotated[str, Resolve(lookup)]) -> Any:
        return types.InputRequiredResult(input_requests={}, request_state="mine")

    async with client(server, mode) as session:
        result = await session.call_tool("sneaky", {})
    assert result.is_error
    assert text(result) == "Error executing tool sneaky"
