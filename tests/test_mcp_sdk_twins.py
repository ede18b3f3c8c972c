"""One tool, two runtimes: the SDK's own resolvers and `inject`, seen by the same client.

Each scenario is a tool written against the SDK's markers (the way an SDK user writes
one). It is registered on a plain SDK server and, from a fresh copy, under `inject`; the
same client then drives both, over the handshake protocol (standalone requests) and over
2026-07-28 (rounds driven by hand, so every round is visible). The transcripts (which
questions were asked, under which keys, in which round, and what the client finally read)
must be identical.
"""

from collections.abc import Callable
from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import (
    Context,
    DeclinedElicitation,
    Elicit,
    ElicitationResult,
    ListRoots,
    MCPServer,
    Resolve,
    Sample,
)
from pydantic import BaseModel, ConfigDict, Field

from mcp_helpers import MODES, client
from modes import pairwise
from resolvent import Container
from resolvent.mcp import inject


class Person(BaseModel):
    name: str


class Go(BaseModel):
    ok: bool


class Handle(BaseModel):
    """A model whose wire names differ from its field names."""

    model_config = ConfigDict(populate_by_name=True)
    user_name: str = Field(alias="userName")


def counted() -> tuple[list[str], Callable[[str], None]]:
    runs: list[str] = []
    return runs, runs.append


def nested_with_tool_argument() -> Callable[..., Any]:
    """A resolver reads a tool argument by name and another resolver's value."""

    async def greeting(ctx: Context) -> str:
        return "hello"

    async def line(city: str, word: Annotated[str, Resolve(greeting)]) -> str:
        return f"{word} from {city}"

    async def postcard(city: str, text: Annotated[str, Resolve(line)]) -> str:
        return text

    return postcard


def shared_dependency() -> Callable[..., Any]:
    """Two consumers of one resolver (one a sync function): it runs once per call."""
    runs, note = counted()

    def clock() -> int:
        note("clock")
        return 42

    async def left(tick: Annotated[int, Resolve(clock)]) -> int:
        return tick

    async def ticks(a: Annotated[int, Resolve(clock)], b: Annotated[int, Resolve(left)]) -> str:
        return f"{a}+{b} after {len(runs)} run(s)"

    return ticks


def bound_method() -> Callable[..., Any]:
    """One bound method referenced twice is one resolver."""
    runs, note = counted()

    class Users:
        async def current(self, ctx: Context) -> str:
            note("current")
            return "ada"

    users = Users()

    async def whoami(
        a: Annotated[str, Resolve(users.current)], b: Annotated[str, Resolve(users.current)]
    ) -> str:
        return f"{a}/{b} after {len(runs)} run(s)"

    return whoami


def validated_default() -> Callable[..., Any]:
    """A resolver and the body see the same validated value of a defaulted argument."""

    async def doubled(count: int) -> int:
        return count * 2

    async def double(count: int = 3, twice: Annotated[int, Resolve(doubled)] = 0) -> str:
        return f"{count} -> {twice}"

    return double


def chain_with_outcome() -> Callable[..., Any]:
    """A declined answer reaches the consumer that asked for the outcome; then a follow-up."""
    runs, note = counted()

    async def who(ctx: Context) -> Elicit[Person]:
        note("who")
        return Elicit("Who are you?", Person)

    async def anonymous(
        person: Annotated[ElicitationResult[Person], Resolve(who)],
    ) -> Elicit[Go]:
        note("anonymous")
        assert isinstance(person, DeclinedElicitation)
        return Elicit("Proceed anonymously?", Go)

    async def enter(
        person: Annotated[ElicitationResult[Person], Resolve(who)],
        go: Annotated[Go, Resolve(anonymous)],
    ) -> str:
        return f"{type(person).__name__}, go={go.ok}, resolver runs: {runs}"

    return enter


def independent_questions() -> Callable[..., Any]:
    """Two independent questions are one round; a dependent one follows."""

    async def name(ctx: Context) -> Elicit[Person]:
        return Elicit("Name?", Person)

    async def city(ctx: Context) -> Elicit[Person]:
        return Elicit("City?", Person)

    async def confirm(
        n: Annotated[Person, Resolve(name)], c: Annotated[Person, Resolve(city)]
    ) -> Elicit[Go]:
        return Elicit(f"Book {n.name} to {c.name}?", Go)

    async def book(n: Annotated[Person, Resolve(name)], go: Annotated[Go, Resolve(confirm)]) -> str:
        return f"{n.name}: {go.ok}"

    return book


def factory_closures() -> Callable[..., Any]:
    """Two closures from one factory share a qualname: the second key is numbered."""

    def asking(message: str) -> Callable[..., Any]:
        async def ask(ctx: Context) -> Elicit[Person]:
            return Elicit(message, Person)

        return ask

    first, second = asking("First?"), asking("Second?")

    async def pair(
        a: Annotated[Person, Resolve(first)], b: Annotated[Person, Resolve(second)]
    ) -> str:
        return f"{a.name}&{b.name}"

    return pair


def aliased_model() -> Callable[..., Any]:
    """An elicited model with aliased fields is restored in a later round."""

    async def handle(ctx: Context) -> Elicit[Handle]:
        return Elicit("Handle?", Handle)

    async def go(h: Annotated[Handle, Resolve(handle)]) -> Elicit[Go]:
        return Elicit(f"Use {h.user_name}?", Go)

    async def sign(h: Annotated[Handle, Resolve(handle)], ok: Annotated[Go, Resolve(go)]) -> str:
        return f"{h.user_name}:{ok.ok}"

    return sign


def sampling_and_roots() -> Callable[..., Any]:
    """A sampling question and a roots question batch with an elicitation."""

    async def capital(ctx: Context) -> Sample:
        message = types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text="Capital of France?")
        )
        return Sample(messages=[message], max_tokens=5)

    async def roots(ctx: Context) -> ListRoots:
        return ListRoots()

    async def name(ctx: Context) -> Elicit[Person]:
        return Elicit("Name?", Person)

    async def trip(
        answer: Annotated[types.CreateMessageResult, Resolve(capital)],
        where: Annotated[types.ListRootsResult, Resolve(roots)],
        who: Annotated[Person, Resolve(name)],
    ) -> str:
        assert isinstance(answer.content, types.TextContent)
        return f"{who.name} to {answer.content.text} with {len(where.roots)} root(s)"

    return trip


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


ANSWERS = {
    "Who are you?": {"action": "decline"},
    "Proceed anonymously?": accept(ok=True),
    "Name?": accept(name="Ada"),
    "City?": accept(name="Oslo"),
    "Book Ada to Oslo?": accept(ok=True),
    "First?": accept(name="one"),
    "Second?": accept(name="two"),
    "Handle?": accept(userName="octocat"),
    "Use octocat?": accept(ok=False),
}

TWINS: dict[str, tuple[Callable[[], Callable[..., Any]], dict[str, Any]]] = {
    "nested-with-tool-argument": (nested_with_tool_argument, {"city": "Oslo"}),
    "client-value-for-a-resolved-parameter": (
        nested_with_tool_argument,
        {"city": "Oslo", "text": "forged"},
    ),
    "shared-dependency": (shared_dependency, {}),
    "bound-method": (bound_method, {}),
    "validated-default": (validated_default, {}),
    "chain-with-outcome": (chain_with_outcome, {}),
    "independent-questions": (independent_questions, {}),
    "factory-closures": (factory_closures, {}),
    "aliased-model": (aliased_model, {}),
    "sampling-and-roots": (sampling_and_roots, {}),
}


CONTAINERS: dict[str, dict[str, Any]] = {
    "sequential": {},
    "concurrent": {"concurrent": True},
    "call-timeout": {"call_timeout": 60.0},
}


def servers(
    make: Callable[[], Callable[..., Any]], config: str = "sequential"
) -> tuple[MCPServer, MCPServer]:
    """The scenario on the SDK's resolvers and, built afresh, under inject."""
    sdk = MCPServer("twin")
    sdk.tool(name="twin")(make())
    container = Container(**CONTAINERS[config])
    ours = MCPServer("twin", lifespan=container.lifespan)
    ours.tool(name="twin")(inject(container)(make()))
    return sdk, ours


SAMPLED = types.CreateMessageResult(
    role="assistant", content=types.TextContent(type="text", text="Paris"), model="m"
)
ROOTS = types.ListRootsResult(roots=[types.Root(uri="file:///srv")])  # type: ignore[arg-type]


def answer(request: types.InputRequest) -> Any:
    if isinstance(request, types.CreateMessageRequest):
        return SAMPLED
    if isinstance(request, types.ListRootsRequest):
        return ROOTS
    assert isinstance(request.params, types.ElicitRequestFormParams)
    return types.ElicitResult.model_validate(ANSWERS[request.params.message])


def question(request: types.InputRequest) -> str:
    params = request.params
    if isinstance(params, types.ElicitRequestFormParams):
        return f"{request.method} {params.message!r} {sorted(params.requested_schema)}"
    return request.method


def outcome(result: types.CallToolResult) -> str:
    shown = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return f"{'error' if result.is_error else 'result'}: {shown}"


async def transcript(
    server: MCPServer, mode: str, tool: str, arguments: dict[str, Any]
) -> list[str]:
    """Everything the client sees of one logical call, round by round."""
    seen: list[str] = []

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        request = types.ElicitRequest(params=params)
        seen.append(f"asked {question(request)}")
        return answer(request)

    async def on_sample(context: ClientRequestContext, params: Any) -> types.CreateMessageResult:
        seen.append("asked sampling/createMessage")
        return SAMPLED

    async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
        seen.append("asked roots/list")
        return ROOTS

    callbacks: dict[str, Any] = {
        "elicitation_callback": on_elicit,
        "sampling_callback": on_sample,
        "list_roots_callback": on_roots,
    }
    async with client(server, mode, **callbacks) as session:
        if "2026" not in mode:
            seen.append(outcome(await session.call_tool(tool, arguments)))
            return seen
        responses: dict[str, Any] | None = None
        state: str | None = None
        for _ in range(6):
            result = await session.session.call_tool(
                tool,
                arguments,
                input_responses=responses,
                request_state=state,
                allow_input_required=True,
            )
            if isinstance(result, types.CallToolResult):
                seen.append(outcome(result))
                return seen
            assert isinstance(result, types.InputRequiredResult)
            requests = result.input_requests or {}
            seen.append(
                "round: " + "; ".join(f"{k} = {question(r)}" for k, r in sorted(requests.items()))
            )
            responses = {key: answer(request) for key, request in requests.items()}
            state = result.request_state
    raise AssertionError(f"no result after 6 rounds: {seen}")


# Every case in both protocol modes, with every container setting, on both backends: the
# rows in which each two of those meet (30), not their product (120).
@pytest.mark.anyio
@pairwise(
    ("case", "mode", "config", "anyio_backend"),
    list(TWINS),
    MODES,
    list(CONTAINERS),
    ["asyncio", "trio"],
)
async def test_the_client_sees_the_same_call_from_the_sdk_and_from_inject(
    mode: str, case: str, config: str
) -> None:
    make, arguments = TWINS[case]
    sdk, ours = servers(make, config)
    expected = await transcript(sdk, mode, "twin", arguments)
    got = await transcript(ours, mode, "twin", arguments)
    if config == "concurrent" and "2026" not in mode:
        # Independent questions are asked at once over standalone requests: any order.
        assert sorted(got) == sorted(expected)
        assert got[-1] == expected[-1]
    else:
        assert got == expected
    assert not got[-1].startswith("error"), got


@pytest.mark.anyio
@pytest.mark.parametrize("case", TWINS)
async def test_the_advertised_schema_is_the_sdks(case: str) -> None:
    """Resolved parameters never reach the tool's inputSchema, exactly as on the SDK."""
    sdk, ours = servers(TWINS[case][0])
    (expected,) = await sdk.list_tools()
    (got,) = await ours.list_tools()
    assert got.input_schema == expected.input_schema
    assert got.name == expected.name
