"""Tools written for the SDK's resolvers behave the same under `inject`.

The SDK's own resolver tests are the reference; these are our tests of the behaviours they
check, driven through the SDK's real in-memory client on both protocol revisions.
"""

from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.server.mcpserver import (
    Context,
    Elicit,
    MCPServer,
    RequestStateSecurity,
    Resolve,
    Sample,
)
from mcp.server.mcpserver.exceptions import InvalidSignature as SdkInvalidSignature
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from mcp_helpers import MODES, Name, answering, client, text
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
    with pytest.raises(SdkInvalidSignature) as caught:
        server.tool()(inject(container)(round_trip))  # first_leg -> second_leg -> first_leg
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


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_body_returning_its_own_input_required_after_plain_results_fails_that_call(
    mode: str,
) -> None:
    """A tool that already answered plainly (its later calls take the wrapper's hot path)
    and then returns an InputRequiredResult of its own, or of a subclass, still fails
    that call, and only that one."""
    container = Container()
    server = MCPServer("sneaky", lifespan=container.lifespan)

    class Mine(types.InputRequiredResult):
        pass

    async def lookup() -> str:
        return "ada"

    answers: list[Any] = [
        "plain",
        "plain",
        "plain",
        types.InputRequiredResult(input_requests={}, request_state="mine"),
        "plain",
        Mine(input_requests={}, request_state="mine"),
    ]

    @server.tool()
    @inject(container)
    async def sneaky(login: Annotated[str, Resolve(lookup)]) -> Any:
        return answers.pop(0)

    async with client(server, mode) as session:
        results = [await session.call_tool("sneaky", {}) for _ in range(6)]
    assert [r.is_error for r in results] == [False, False, False, True, False, True]
    assert text(results[3]) == "Error executing tool sneaky"


# --- What the client sees: the same text from the SDK and from inject -----------------
#
# Each scenario registers one tool twice, on a plain SDK server and under inject, drives
# both with the same client, and compares what the client is shown.


class Login(BaseModel):
    username: str


async def ask_login(ctx: Context) -> Elicit[Login]:
    return Elicit("Who are you?", Login)


async def whoami(login: Annotated[Login, Resolve(ask_login)]) -> str:
    return login.username


def twin_servers(tool: Any) -> tuple[MCPServer, MCPServer]:
    """*tool* on the SDK's own resolvers and under inject: the reference and ours."""
    sdk = MCPServer("twins")
    sdk.tool()(tool)
    container = Container()
    ours = MCPServer("twins", lifespan=container.lifespan)
    ours.tool()(inject(container)(tool))
    return sdk, ours


async def shown(server: MCPServer, mode: str, callback: Any) -> str:
    async with client(server, mode, elicitation_callback=callback) as session:
        result = await session.call_tool(whoami.__name__, {})
    assert result.is_error
    return text(result)


REFUSALS = {
    "declined": answering("decline"),
    "cancelled": answering("cancel"),
    "accepted-without-content": answering("accept"),
    "content-off-the-schema": answering("accept", {"nickname": "ada"}),
}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", REFUSALS)
async def test_a_refused_or_unfit_answer_reads_as_the_sdk_words_it(mode: str, case: str) -> None:
    sdk, ours = twin_servers(whoami)
    expected = await shown(sdk, mode, REFUSALS[case])
    got = await shown(ours, mode, REFUSALS[case])
    assert got == expected
    assert "ada" not in got  # the client's content is never echoed back
    assert_snapshot(f"mcp_sdk_wording_{case}_{'rounds' if '2026' in mode else 'legacy'}", got)


async def answer_manually(
    server: MCPServer, answer: Any, tool: str = "whoami", resolver: Any = ask_login
) -> str:
    """One round driven by hand on 2026-07-28: the question, then *answer* to it."""
    async with client(server, "2026-07-28", **CAPABLE) as session:
        first = await session.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        (key,) = first.input_requests
        assert key == f"{resolver.__module__}:{resolver.__qualname__}"
        final = await session.session.call_tool(
            tool,
            {},
            input_responses={key: answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(final, types.CallToolResult)
    if not final.is_error:
        return "ok: " + text(final)
    return text(final)


async def never(context: Any, params: Any) -> Any:
    raise AssertionError("answered by hand")  # pragma: no cover - declares the capability


CAPABLE: dict[str, Any] = {"elicitation_callback": never, "sampling_callback": never}

WRONG_ANSWERS = {
    "sampling-result": types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="x"), model="m"
    ),
    "roots-result": types.ListRootsResult(roots=[]),
    "accepted": types.ElicitResult(action="accept", content={"username": "ada"}),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", WRONG_ANSWERS)
async def test_an_answer_of_another_kind_reads_as_the_sdk_words_it(case: str) -> None:
    """A client answering an elicitation with some other result, keyed the SDK's way."""
    sdk, ours = twin_servers(whoami)
    expected = await answer_manually(sdk, WRONG_ANSWERS[case])
    got = await answer_manually(ours, WRONG_ANSWERS[case])
    assert got == expected
    if case == "accepted":
        assert got == "ok: ada"
    else:
        assert_snapshot(f"mcp_sdk_wording_wrong_kind_{case}", got)


async def ask_capital(ctx: Context) -> Sample:
    return Sample(
        messages=[
            types.SamplingMessage(
                role="user", content=types.TextContent(type="text", text="Capital of France?")
            )
        ],
        max_tokens=8,
    )


async def capital(answer: Annotated[types.CreateMessageResult, Resolve(ask_capital)]) -> str:
    content = answer.content
    assert isinstance(content, types.TextContent)
    return content.text


@pytest.mark.anyio
async def test_an_elicitation_answer_to_a_sampling_question_reads_as_the_sdk_words_it() -> None:
    sdk, ours = twin_servers(capital)
    wrong = types.ElicitResult(action="accept", content={"city": "Paris"})
    expected = await answer_manually(sdk, wrong, "capital", ask_capital)
    got = await answer_manually(ours, wrong, "capital", ask_capital)
    assert got == expected
    assert "Paris" not in got
    assert_snapshot("mcp_sdk_wording_wrong_kind_sampling", got)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", [whoami, capital], ids=["elicit", "sample"])
async def test_a_client_without_the_capability_gets_the_sdks_protocol_error(
    mode: str, tool: Any
) -> None:
    """-32021 names the resolver by its wire key and lists what the client must declare."""
    errors: list[MCPError] = []
    for server in twin_servers(tool):
        async with client(server, mode) as session:
            with pytest.raises(MCPError) as caught:
                await session.call_tool(tool.__name__, {})
        errors.append(caught.value)
    expected, got = errors
    assert got.error.code == expected.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert got.error.message == expected.error.message
    assert got.error.data == expected.error.data
    assert_snapshot(f"mcp_sdk_wording_capability_{tool.__name__}", got.error.message)


# --- Registration: the SDK's verdict first, resolvent's path and fix after it ----------


async def first_leg(leg: "Annotated[str, Resolve(second_leg)]") -> str:
    return leg  # pragma: no cover - refused before any call


async def second_leg(leg: Annotated[str, Resolve(first_leg)]) -> str:
    return leg  # pragma: no cover


async def round_trip(leg: Annotated[str, Resolve(first_leg)]) -> str:
    return leg  # pragma: no cover


async def needs_a_mystery(mystery: int) -> Login:
    return Login(username=str(mystery))  # pragma: no cover


async def mystery_login(login: Annotated[Login, Resolve(needs_a_mystery)]) -> str:
    return login.username  # pragma: no cover


class LoginFromRegistry:
    """A callable object as a resolver: the SDK names it by its type."""

    async def __call__(self, mystery: int) -> Login:
        return Login(username=str(mystery))  # pragma: no cover


async def registry_login(login: Annotated[Login, Resolve(LoginFromRegistry())]) -> str:
    return login.username  # pragma: no cover


async def login_or_confirm(ctx: Context) -> Elicit[Login] | Elicit[Name]:
    return Elicit("Who are you?", Login)  # pragma: no cover


async def two_questions(login: Annotated[Login, Resolve(login_or_confirm)]) -> str:
    return login.username  # pragma: no cover


async def optional_login(login: Annotated[Login, Resolve(ask_login)] | None = None) -> str:
    return login.username if login else ""  # pragma: no cover


MISTAKES = {
    "cycle": round_trip,
    "unresolvable-parameter": mystery_login,
    "callable-object": registry_login,
    "two-question-arms": two_questions,
    "marker-in-a-union": optional_login,
}


@pytest.mark.parametrize("case", MISTAKES)
def test_a_mistake_in_an_sdk_marker_tool_leads_with_the_sdks_own_verdict(case: str) -> None:
    """Code matching the SDK's registration error keeps matching; resolvent's details follow."""
    tool = MISTAKES[case]
    with pytest.raises(SdkInvalidSignature) as reference:
        MCPServer("plain").tool()(tool)
    container = Container()
    server = MCPServer("injected", lifespan=container.lifespan)
    with pytest.raises(SdkInvalidSignature) as caught:
        server.tool()(inject(container)(tool))
    error = caught.value
    assert isinstance(error, InvalidSignature)
    headline, details = str(error).split("\n", 1)
    assert headline == str(reference.value)
    assert f"{__name__}." in details  # resolvent still says where, and how to fix it
    if case != "marker-in-a-union":  # that one shows the marker object, address and all
        assert_snapshot(f"mcp_sdk_registration_{case}", str(error))


def test_a_resolvent_marker_tool_keeps_resolvents_own_words() -> None:
    from resolvent import Resolve as OurResolve

    async def needs_a_number(mystery: int) -> Login:
        return Login(username=str(mystery))  # pragma: no cover

    async def ours(login: Annotated[Login, OurResolve(needs_a_number)]) -> str:
        return login.username  # pragma: no cover

    with pytest.raises(SdkInvalidSignature) as caught:
        MCPServer("injected").tool()(inject(Container())(ours))
    assert str(caught.value).startswith("cannot resolve parameter 'mystery'")


KEYS = [b"0123456789abcdef0123456789abcdef"]  # both servers seal with one key, as on deploy


@pytest.mark.anyio
@pytest.mark.parametrize("direction", ["sdk-then-inject", "inject-then-sdk"])
async def test_a_round_begun_by_the_other_runtime_asks_again_instead_of_failing(
    direction: str,
) -> None:
    """Mid-deploy, a call's next round may reach the other runtime: it re-asks, no error."""
    sdk = MCPServer("deploy", request_state_security=RequestStateSecurity(keys=KEYS))
    sdk.tool()(whoami)
    container = Container()
    ours = MCPServer(
        "deploy",
        lifespan=container.lifespan,
        request_state_security=RequestStateSecurity(keys=KEYS),
    )
    ours.tool()(inject(container)(whoami))
    before, after = (sdk, ours) if direction == "sdk-then-inject" else (ours, sdk)
    async with (
        client(before, "2026-07-28", **CAPABLE) as old,
        client(after, "2026-07-28", **CAPABLE) as new,
    ):
        first = await old.session.call_tool("whoami", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        (key,) = first.input_requests
        accepted = types.ElicitResult(action="accept", content={"username": "ada"})
        second = await new.session.call_tool(
            "whoami",
            {},
            input_responses={key: accepted},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult)
        assert second.input_requests is not None
        assert list(second.input_requests) == [key]  # the same question, asked again
        final = await new.session.call_tool(
            "whoami",
            {},
            input_responses={key: accepted},
            request_state=second.request_state,
            allow_input_required=True,
        )
    assert isinstance(final, types.CallToolResult)
    assert text(final) == "ada"
